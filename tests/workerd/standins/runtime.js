// Test-only stand-in for a runtime package, `@sandbox-workers/<language>`, installed under
// that name by tests/workerd/harness.py: a rendered runtime Worker (its index.js) re-exports
// it unmodified. `standin.json`, written next to it, gives its language and the interpreter
// protocol it speaks. It serves the runtime side of the contract the real runtime Workers
// have (sandbox-workers spec 2.2, 2.3) from a `sandbox-workbench serve` on loopback (env
// SERVE_URL, SERVE_TOKEN; serve's binding for the language is its upper-case name):
//   GET /interpreter   serve's runtime entry as { language, engine, contexts, protocol };
//                      `contexts` only where this Worker binds an INTERPRETER
//   POST /execute      serve's stateless execution, relayed
//   executeInContext(key, args, getFiles)   the RPC entry point: the key and the INTERPRETER
//                      binding are checked (failures are returned, never thrown), then the
//                      call goes to the `Interpreter` Durable Object named by the key, which
//                      runs `args.code` in context `args.contextId` of sandbox `key` on serve.
// A stand-in of another protocol answers /interpreter with it and has no `executeInContext`
// at all: the call a protocol-1 core makes throws, as between real packages of versions that
// do not match.

import { DurableObject, WorkerEntrypoint } from "cloudflare:workers";
import standin from "./standin.json";

const INTERPRETER_KEY = /^[A-Za-z0-9._-]{1,128}$/;
const NO_INTERPRETER_BINDING =
  "Code contexts are not supported: this Worker has no INTERPRETER Durable Object binding";
const SERVE_BINDING = standin.language.toUpperCase();

function serve(env, path, init = {}) {
  return fetch(`${env.SERVE_URL}${path}`, {
    ...init,
    headers: { authorization: `Bearer ${env.SERVE_TOKEN}`, "content-type": "application/json" },
  });
}

function failure(status, message) {
  const body = { code: "VALIDATION_FAILED", message, context: {}, httpStatus: status, timestamp: new Date().toISOString() };
  return { ok: false, status, body };
}

function json(status, body) {
  return Response.json(body, { status, headers: { "cache-control": "no-store" } });
}

class Runtime extends WorkerEntrypoint {
  async fetch(request) {
    const url = new URL(request.url);
    if (url.pathname === "/interpreter") return this.interpreter();
    if (url.pathname !== "/execute") return new Response("Not found", { status: 404 });
    if (request.method !== "POST") return new Response("Method not allowed", { status: 405 });
    const answer = await serve(this.env, `/v1/runtimes/${SERVE_BINDING}/execute`, {
      method: "POST",
      body: await request.arrayBuffer(),
    });
    return new Response(answer.body, {
      status: answer.status,
      headers: { "content-type": answer.headers.get("content-type") ?? "application/json" },
    });
  }

  async interpreter() {
    const answer = await serve(this.env, "/v1/runtimes");
    if (!answer.ok) return json(502, { error: `serve answered HTTP ${answer.status}` });
    const entry = ((await answer.json()).runtimes ?? []).find((runtime) => runtime.binding === SERVE_BINDING);
    if (entry === undefined) return json(404, { error: `serve has no ${standin.language} runtime` });
    return json(200, {
      language: entry.language,
      engine: entry.engine,
      contexts: entry.contexts && this.env.INTERPRETER !== undefined,
      protocol: standin.protocol,
    });
  }
}

class ContextRuntime extends Runtime {
  async executeInContext(key, args, getFiles) {
    if (!INTERPRETER_KEY.test(key)) return failure(400, "Invalid interpreter key");
    if (this.env.INTERPRETER === undefined) return failure(400, NO_INTERPRETER_BINDING);
    const interpreter = this.env.INTERPRETER.get(this.env.INTERPRETER.idFromName(key));
    return interpreter.executeInContext(key, args, getFiles);
  }
}

export class Interpreter extends DurableObject {
  async executeInContext(key, args) {
    const answer = await serve(this.env, `/v1/sandboxes/${encodeURIComponent(key)}/execute`, {
      method: "POST",
      body: JSON.stringify({ code: args.code, contextId: args.contextId, envVars: args.envVars }),
    });
    const body = await answer.json();
    if (!answer.ok) return { ok: false, status: answer.status, body };
    return { ok: true, result: { ...body, workspace: { dirs: [], files: [], deleted: [] } } };
  }
}

export default standin.protocol === 1 ? ContextRuntime : Runtime;
