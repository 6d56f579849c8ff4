export { default } from "@sandbox-workers/ruby";
