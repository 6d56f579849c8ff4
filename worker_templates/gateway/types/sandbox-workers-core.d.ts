// Type declarations for `@sandbox-workers/core`, used ONLY by the template's type check
// (`npx tsc --noEmit -p .`): the package is not published on the npm registry yet, so a
// clean clone cannot install it. This is an ambient module declaration, not a `paths`
// mapping, on purpose: wrangler's bundler (esbuild) honours tsconfig `paths`, and would
// then try to bundle this declaration file instead of the real package. esbuild ignores
// `.d.ts` files, so at deploy time the import resolves to the installed package.
//
// Shape per the sandbox-workers specification, section 1.1: a plain class with
// `constructor(state, env)`, `fetch(request)` and `alarm()`.
declare module "@sandbox-workers/core" {
  export class Sandbox implements DurableObject {
    constructor(state: DurableObjectState, env: unknown);
    fetch(request: Request): Promise<Response>;
    alarm(): Promise<void>;
  }
}
