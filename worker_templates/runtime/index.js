{{#contexts}}
export { default, Interpreter } from "{{package}}";
{{/contexts}}
{{^contexts}}
export { default } from "{{package}}";
{{/contexts}}
