// Test-only stand-in for a runtime Worker (sandbox-workers spec 2.2), bound to the
// gateway as a Service Binding named `env.BINDING`. It answers from a
// `sandbox-workbench serve` process on loopback:
//   GET /interpreter -> serve's GET /v1/runtimes entry for BINDING
//                       as { language, engine, contexts, protocol }
//   POST /execute    -> serve's POST /v1/runtimes/<BINDING>/execute, relayed.

function json(status, body) {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json" },
  });
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const authorization = `Bearer ${env.SERVE_TOKEN}`;
    if (url.pathname === "/interpreter" && request.method === "GET") {
      const answer = await fetch(`${env.SERVE_URL}/v1/runtimes`, { headers: { authorization } });
      if (!answer.ok) return json(502, { error: `serve answered HTTP ${answer.status}` });
      const data = await answer.json();
      const entry = (data.runtimes ?? []).find((runtime) => runtime.binding === env.BINDING);
      if (entry === undefined) return json(404, { error: `serve has no runtime '${env.BINDING}'` });
      const { language, engine, contexts, protocol } = entry;
      return json(200, { language, engine, contexts, protocol });
    }
    if (url.pathname === "/execute" && request.method === "POST") {
      const answer = await fetch(
        `${env.SERVE_URL}/v1/runtimes/${encodeURIComponent(env.BINDING)}/execute`,
        {
          method: "POST",
          headers: {
            authorization,
            "content-type": request.headers.get("content-type") ?? "application/json",
          },
          body: await request.arrayBuffer(),
        },
      );
      return new Response(answer.body, {
        status: answer.status,
        headers: { "content-type": answer.headers.get("content-type") ?? "application/json" },
      });
    }
    return json(404, { error: "Not found" });
  },
};
