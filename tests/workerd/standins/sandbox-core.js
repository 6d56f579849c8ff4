// Test-only stand-in for `@sandbox-workers/core` (aliased in the generated
// wrangler.test.jsonc; the gateway template itself is not modified). Its `Sandbox`
// Durable Object forwards each request the gateway sends it (path, method, body and the
// `x-sandbox-id` header) to a `sandbox-workbench serve` process on loopback and returns
// serve's answer unchanged, so the gateway's own routing, auth, registry and error
// mapping run in workerd against real local engines.

export class Sandbox {
  constructor(state, env) {
    this.state = state;
    this.env = env;
  }

  async fetch(request) {
    const url = new URL(request.url);
    const id = request.headers.get("x-sandbox-id") ?? "";
    // The gateway forwards the sandbox root as "/"; serve's route has no trailing slash.
    const rest = url.pathname === "/" ? "" : url.pathname;
    const target = `${this.env.SERVE_URL}/v1/sandboxes/${encodeURIComponent(id)}${rest}${url.search}`;
    const init = {
      method: request.method,
      headers: {
        authorization: `Bearer ${this.env.SERVE_TOKEN}`,
        "content-type": request.headers.get("content-type") ?? "application/json",
      },
    };
    if (request.method !== "GET" && request.method !== "HEAD" && request.body !== null) {
      init.body = await request.arrayBuffer();
    }
    const answer = await fetch(target, init);
    return new Response(answer.body, { status: answer.status, headers: answer.headers });
  }

  async alarm() {}
}
