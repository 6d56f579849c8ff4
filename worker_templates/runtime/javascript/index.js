export { default, Interpreter } from "@sandbox-workers/javascript";
