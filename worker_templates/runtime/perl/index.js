export { default, Interpreter } from "@sandbox-workers/perl";
