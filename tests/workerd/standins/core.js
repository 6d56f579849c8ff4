// Test-only stand-in for `@sandbox-workers/core`, installed under that name, at the pinned
// version, by tests/workerd/harness.py: the rendered gateway imports it unmodified.
//
// Its `Sandbox` Durable Object keeps no state of its own: a `sandbox-workbench serve` on
// loopback (env SERVE_URL, SERVE_TOKEN) holds every sandbox, context and file, and answers
// every request the stand-in does not answer itself. What the stand-in does do is the
// caller side of the contract the real core has with runtime Workers (sandbox-workers spec
// 2.3, 2.4.1, 7.2), so that contract runs in workerd:
//   - before a code context is created (POST /contexts, or a run's default context) it
//     probes the binding's GET /interpreter and refuses a runtime that is not one or speaks
//     another interpreter protocol (400 "Binding 'B' speaks interpreter protocol n; this
//     caller supports 1"), or that has no contexts;
//   - a run in a context goes through the binding's `executeInContext` RPC; when the call
//     itself throws (a runtime of another version has no such method) the run answers 502
//     "Binding 'B' failed: <message>", as the real core does;
//   - a run on a binding without contexts, with no context of it, is the stateless
//     fallback: the runtime's POST /execute with the sandbox's env vars and the call's.
// Deviations, because serve holds the state: the interpreter key is the sandbox id (the real
// core uses its Durable Object id); `args.envVars` carries the call's own env vars (serve
// merges them with the sandbox's and the context's); the workspace manifest is empty,
// `getFiles` has nothing to give, and the workspace diff of a result is dropped.

const INTERPRETER_PROTOCOL = 1;
const INTERNAL_ORIGIN = "https://sandbox.internal";
const BINDING_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAX_CODE_BYTES = 65_536;

function errorResponse(status, code, message) {
  const body = { code, message, context: {}, httpStatus: status, timestamp: new Date().toISOString() };
  return Response.json(body, { status, headers: { "cache-control": "no-store" } });
}

function jsonResponse(status, body) {
  return Response.json(body, { status, headers: { "cache-control": "no-store" } });
}

function parse(bytes) {
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return undefined;
  }
}

function isObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function nonEmptyString(value) {
  return typeof value === "string" && value !== "";
}

/**
 * A run the real core would take to a context or the stateless fallback (spec 2.4.1 steps
 * 1-5); anything else goes to serve, which answers every validation error itself.
 */
function plainRun(body) {
  if (!isObject(body) || "cwd" in body) return false;
  if (typeof body.code !== "string" || body.code.trim() === "") return false;
  if (new TextEncoder().encode(body.code).length > MAX_CODE_BYTES) return false;
  if (body.envVars !== undefined) {
    if (!isObject(body.envVars)) return false;
    for (const [key, value] of Object.entries(body.envVars)) {
      if (!ENV_KEY.test(key) || (value !== null && typeof value !== "string")) return false;
    }
  }
  if (body.contextId !== undefined && !nonEmptyString(body.contextId)) return false;
  if (body.binding !== undefined && !nonEmptyString(body.binding)) return false;
  return body.contextId !== undefined || body.binding !== undefined;
}

export class Sandbox {
  constructor(state, env) {
    this.state = state;
    this.env = env;
    this.queue = Promise.resolve();
  }

  /** One request at a time, in arrival order (spec 1.5), like the real Sandbox. */
  fetch(request) {
    const turn = this.queue.then(() => this.handle(request));
    this.queue = turn.catch(() => {});
    return turn;
  }

  async alarm() {}

  async handle(request) {
    const url = new URL(request.url);
    const id = request.headers.get("x-sandbox-id") ?? "";
    const post = request.method === "POST";
    const body = post ? new Uint8Array(await request.arrayBuffer()) : undefined;
    let answer = null;
    if (post && url.pathname === "/contexts") answer = await this.refuseContext(parse(body));
    if (post && url.pathname === "/execute") answer = await this.run(id, parse(body));
    if (answer !== null) return answer;
    // The gateway forwards the sandbox root as "/"; serve's route has no trailing slash.
    const rest = url.pathname === "/" ? "" : url.pathname;
    const forwarded = await this.serve(request.method, id, rest + url.search, body, request.headers);
    return new Response(forwarded.body, { status: forwarded.status, headers: forwarded.headers });
  }

  serve(method, id, rest, body, headers = new Headers()) {
    const init = {
      method,
      headers: {
        authorization: `Bearer ${this.env.SERVE_TOKEN}`,
        "content-type": headers.get("content-type") ?? "application/json",
      },
    };
    if (body !== undefined) init.body = body;
    return fetch(`${this.env.SERVE_URL}/v1/sandboxes/${encodeURIComponent(id)}${rest}`, init);
  }

  async serveJson(method, id, rest, value) {
    const body = value === undefined ? undefined : new TextEncoder().encode(JSON.stringify(value));
    const answer = await this.serve(method, id, rest, body);
    return { status: answer.status, body: await answer.json() };
  }

  runtime(binding) {
    const candidate = BINDING_NAME.test(binding) ? this.env[binding] : undefined;
    return typeof candidate?.fetch === "function" ? candidate : undefined;
  }

  /** The binding's GET /interpreter (spec 7.2): `{ info }`, or `{ refusal }` (a 400). */
  async probe(binding) {
    const notRuntime = {
      refusal: errorResponse(400, "VALIDATION_FAILED", `Binding '${binding}' is not a sandbox-workers runtime Worker`),
    };
    let info;
    try {
      info = await (await this.runtime(binding).fetch(`${INTERNAL_ORIGIN}/interpreter`)).json();
    } catch {
      return notRuntime;
    }
    if (
      !isObject(info) ||
      typeof info.language !== "string" ||
      typeof info.engine !== "string" ||
      typeof info.contexts !== "boolean" ||
      (info.protocol !== undefined && typeof info.protocol !== "number")
    ) {
      return notRuntime;
    }
    const protocol = info.protocol ?? 1;
    if (protocol !== INTERPRETER_PROTOCOL) {
      const message = `Binding '${binding}' speaks interpreter protocol ${protocol}; this caller supports ${INTERPRETER_PROTOCOL}`;
      return { refusal: errorResponse(400, "VALIDATION_FAILED", message) };
    }
    return { info };
  }

  /** POST /contexts: the probe's refusal, or null (serve creates the context). */
  async refuseContext(body) {
    if (!isObject(body) || !nonEmptyString(body.binding) || this.runtime(body.binding) === undefined) {
      return null;
    }
    const { info, refusal } = await this.probe(body.binding);
    if (refusal !== undefined) return refusal;
    if (!info.contexts) {
      const message = `Code contexts are not supported by binding '${body.binding}' (${info.language})`;
      return errorResponse(400, "VALIDATION_FAILED", message);
    }
    return null;
  }

  /** POST /execute (spec 2.4.1): the answer, or null for serve to answer. */
  async run(id, body) {
    if (!plainRun(body)) return null;
    const listed = await this.serveJson("GET", id, "/contexts");
    if (listed.status !== 200) return null;
    let context;
    if (body.contextId !== undefined) {
      context = listed.body.contexts.find((entry) => entry.id === body.contextId);
      if (context === undefined) return null; // serve: 404 CONTEXT_NOT_FOUND
    } else {
      // The default context: the binding's oldest (serve lists them by createdAt).
      context = listed.body.contexts.find((entry) => entry.binding === body.binding);
      if (context === undefined) {
        if (this.runtime(body.binding) === undefined) return null; // serve: Unknown binding
        const { info, refusal } = await this.probe(body.binding);
        if (refusal !== undefined) return refusal;
        if (!info.contexts) return this.runStateless(id, body);
        const created = await this.serveJson("POST", id, "/contexts", { binding: body.binding });
        if (created.status !== 201) return jsonResponse(created.status, created.body);
        context = created.body;
      }
    }
    const runtime = this.runtime(context.binding);
    if (runtime === undefined) {
      return errorResponse(400, "VALIDATION_FAILED", `Unknown binding '${context.binding}'`);
    }
    const args = {
      contextId: context.id,
      code: body.code,
      envVars: body.envVars ?? {},
      workspace: { dirs: [], manifest: {} },
    };
    let outcome;
    try {
      outcome = await runtime.executeInContext(id, args, () => []);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      return errorResponse(502, "INTERNAL_ERROR", `Binding '${context.binding}' failed: ${message}`);
    }
    if (!outcome.ok) return jsonResponse(outcome.status, outcome.body);
    const { workspace: _diff, ...result } = outcome.result;
    return jsonResponse(200, result);
  }

  /** The stateless fallback (spec 2.4.1 step 9): the sandbox's env vars under the call's. */
  async runStateless(id, body) {
    const info = await this.serveJson("GET", id, "");
    if (info.status !== 200) return jsonResponse(info.status, info.body);
    const envVars = { ...info.body.envVars };
    for (const [key, value] of Object.entries(body.envVars ?? {})) {
      if (value === null) delete envVars[key];
      else envVars[key] = value;
    }
    const answer = await this.runtime(body.binding).fetch(
      new Request(`${INTERNAL_ORIGIN}/execute`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ code: body.code, envVars }),
      }),
    );
    return new Response(answer.body, {
      status: answer.status,
      headers: { "content-type": "application/json", "cache-control": "no-store" },
    });
  }
}
