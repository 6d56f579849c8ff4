// A stand-in declaration of `@sandbox-workers/core` for the template's type check when
// the package is not installed (it is not published on the npm registry yet, so a clean
// clone cannot install it): `npm run check:standin` (tsconfig.standin.json) includes it,
// `npm run check` (tsconfig.json) does not, so with the package installed its own types
// are checked and a change in its API fails the check. It is an ambient declaration, not
// a `paths` mapping: wrangler's bundler (esbuild) honours tsconfig `paths` and would bundle
// this file instead of the package, while it ignores `.d.ts` files.
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
