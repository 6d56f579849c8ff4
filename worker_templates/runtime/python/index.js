export { default, Interpreter } from "@sandbox-workers/python";
