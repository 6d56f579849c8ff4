// The sandbox-workbench gateway Worker: the workbench gateway protocol, version 1
// (docs/gateway-protocol.md in the sandbox-workbench repository), in front of the
// `Sandbox` Durable Object of `@sandbox-workers/core`, which this Worker hosts, and of
// the runtime Workers it reaches through Service Bindings.
//
// Routes: GET /v1/health (no auth), GET /v1/runtimes, POST /v1/runtimes/:binding/execute,
// GET /v1/sandboxes, and /v1/sandboxes/:id[/execute|/contexts[/:contextId]|/env|/files],
// the latter forwarded to the Sandbox Durable Object named by :id. The extension
// /v1/sandboxes/:id/files/batch is answered here, one `/files` call per entry
// (src/files-batch.ts). The local-only extensions (/cancel, /history) are unknown routes
// here: 404 `Not found`. A sandbox route sent with `x-sandbox-must-exist: 1` is answered
// 404 `SANDBOX_NOT_FOUND` when the registry does not hold the sandbox (`requireRegistered`).

import manifest from "../package.json";
import { applyBatch } from "./files-batch";
import {
  HttpError,
  allow,
  decodeBody,
  errorResponse,
  isObject,
  json,
  notFound,
  readBody,
  type JsonObject,
} from "./http";
import { SandboxRegistry, type SandboxEntry } from "./registry";

export { Sandbox } from "@sandbox-workers/core";
export { SandboxRegistry };

/** The gateway's own version (`GET /v1/health`): package.json `version`. */
const VERSION = manifest.version;
/** The gateway protocol version this Worker speaks. */
const PROTOCOL = 1;
const CORE_PACKAGE = "@sandbox-workers/core";
/**
 * The interpreter protocol (spec 2.2.2) of the pinned core: the only one it accepts from a
 * runtime (spec 7.2). worker_templates/versions.json records it with the pinned versions.
 */
const INTERPRETER_PROTOCOL = 1;

const SMALL_BODY_CAP = 98_304; // /execute, /contexts, /env, stateless execute
const FILES_BODY_CAP = 2_097_152; // /files
/** /files/batch, also after gzip decoding (as `serve`: half the 16 MiB workspace). */
const FILES_BATCH_BODY_CAP = 8 * 1_048_576;
/**
 * Entries of one /files/batch. Lower than `serve`'s 1,000: each entry here is one Durable
 * Object call, and one more (a `list`) when it has a precondition, and a Worker
 * invocation may make at most 1,000 such calls.
 */
const FILES_BATCH_MAX_ENTRIES = 400;
/** The protocol extensions this Worker serves (`GET /v1/health`). */
const MUST_EXIST_FEATURE = "sandbox-must-exist";
const FEATURES = ["files-batch", MUST_EXIST_FEATURE];
/** A request header (value `1`): carry the request out only if its sandbox exists. */
const MUST_EXIST_HEADER = "x-sandbox-must-exist";

/** The request carries `x-sandbox-must-exist: 1`. */
function mustExist(request: Request): boolean {
  return (request.headers.get(MUST_EXIST_HEADER) ?? "").trim() === "1";
}
const INTERNAL_ORIGIN = "https://sandbox.internal";
const REGISTRY_NAME = "registry";
const DEFAULT_IDLE_TTL_MS = 86_400_000;
const DEFAULT_RUNTIME_BINDINGS = "JAVASCRIPT,PYTHON,PERL,RUBY";
const RUNTIME_PROBE_TIMEOUT_MS = 10_000;

const SANDBOX_ID_PATTERN = "^[A-Za-z0-9._-]{1,63}$";
const SANDBOX_ID_RE = /^[A-Za-z0-9._-]{1,63}$/;
const RESERVED_SANDBOX_IDS = new Set(["www", "api", "admin", "root", "system", "cloudflare", "workers"]);

export interface Env {
  /** Durable Object namespace bound to `Sandbox` from `@sandbox-workers/core`. */
  Sandbox: DurableObjectNamespace;
  /** Durable Object namespace bound to `SandboxRegistry` (one instance, "registry"). */
  REGISTRY: DurableObjectNamespace<SandboxRegistry>;
  /** Secret (`wrangler secret put WORKBENCH_TOKEN`): the bearer token clients send. */
  WORKBENCH_TOKEN?: string;
  /** Comma-separated names of the runtime Service Bindings (e.g. "JAVASCRIPT,PYTHON"). */
  RUNTIME_BINDINGS?: string;
  /** Sandbox idle TTL in milliseconds (spec 8.3); read by the Sandbox object too. */
  SANDBOX_IDLE_TTL_MS?: string;
}

// ---------------------------------------------------------------------------------------
// Authentication: `Authorization: Bearer <token>`, compared in constant time.

const encoder = new TextEncoder();

async function sha256(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

/** Constant-time comparison of two strings (of their fixed-length SHA-256 digests). */
async function tokensEqual(presented: string, expected: string): Promise<boolean> {
  const [a, b] = await Promise.all([sha256(presented), sha256(expected)]);
  let difference = 0;
  for (let i = 0; i < a.length; i++) difference |= (a[i] ?? 0) ^ (b[i] ?? 0);
  return difference === 0;
}

async function authenticate(request: Request, env: Env): Promise<void> {
  const header = request.headers.get("authorization") ?? "";
  const match = /^Bearer[ \t]+([^\s]+)[ \t]*$/i.exec(header);
  const presented = match?.[1] ?? "";
  const expected = env.WORKBENCH_TOKEN ?? "";
  // Always hash and compare, so a missing header and a wrong token take the same path.
  const equal = await tokensEqual(presented, expected);
  if (!equal || presented === "" || expected === "") {
    throw new HttpError(401, "Missing or invalid bearer token", "UNAUTHORIZED", {}, {
      "www-authenticate": "Bearer",
    });
  }
}

// ---------------------------------------------------------------------------------------
// Validation helpers

/** `validateSandboxId` (spec 8.1): the validator's message, or null when the id is valid. */
function sandboxIdError(id: string): string | null {
  if (!SANDBOX_ID_RE.test(id)) return `Invalid sandbox id "${id}": must match /${SANDBOX_ID_PATTERN}/`;
  if (id.startsWith("-") || id.endsWith("-")) {
    return `Invalid sandbox id "${id}": cannot start or end with a hyphen`;
  }
  if (RESERVED_SANDBOX_IDS.has(id.toLowerCase())) {
    return `Invalid sandbox id "${id}": '${id}' is a reserved name`;
  }
  return null;
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** `SANDBOX_IDLE_TTL_MS` per spec 8.3: unset/empty/invalid → 24 h; a finite number ≥ 0 → it. */
function idleTtlMs(value: string | undefined): number {
  if (value === undefined || value.trim() === "") return DEFAULT_IDLE_TTL_MS;
  const parsed = Number(value);
  return Number.isFinite(parsed) && parsed >= 0 ? parsed : DEFAULT_IDLE_TTL_MS;
}

/** The configured runtime binding names, in order, without blanks or duplicates. */
function runtimeBindings(env: Env): string[] {
  const names = (env.RUNTIME_BINDINGS ?? DEFAULT_RUNTIME_BINDINGS)
    .split(",")
    .map((name) => name.trim())
    .filter((name) => name !== "");
  return [...new Set(names)];
}

/** The Service Binding named `name`, if it is configured and looks like a Fetcher. */
function runtimeFetcher(env: Env, name: string): Fetcher | undefined {
  if (!runtimeBindings(env).includes(name)) return undefined;
  const candidate = (env as unknown as Record<string, unknown>)[name];
  if (typeof candidate === "object" && candidate !== null && "fetch" in candidate) {
    const fetcher = candidate as Fetcher;
    if (typeof fetcher.fetch === "function") return fetcher;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------
// Versions and runtimes

interface CoreInfo {
  name: string;
  version: string;
  interpreterProtocol: number;
}

/**
 * What runs the sandboxes: `@sandbox-workers/core` at the exact version package.json pins,
 * the one `check-versions.mjs` found installed when this Worker was built.
 */
function coreInfo(): CoreInfo {
  return {
    name: CORE_PACKAGE,
    version: manifest.peerDependencies[CORE_PACKAGE],
    interpreterProtocol: INTERPRETER_PROTOCOL,
  };
}

interface RuntimeEntry {
  binding: string;
  language: string;
  engine: string;
  contexts: boolean;
  protocol: number;
}

interface UnavailableRuntime {
  binding: string;
  error: string;
}

/** A runtime Worker's `GET /interpreter` answer (spec 2.2.2), or the reason it is unusable. */
async function probeRuntime(env: Env, binding: string): Promise<RuntimeEntry | UnavailableRuntime> {
  const fetcher = runtimeFetcher(env, binding);
  if (fetcher === undefined) {
    return { binding, error: `Unknown binding '${binding}'` };
  }
  try {
    const response = await fetcher.fetch(`${INTERNAL_ORIGIN}/interpreter`, {
      method: "GET",
      signal: AbortSignal.timeout(RUNTIME_PROBE_TIMEOUT_MS),
    });
    if (!response.ok) {
      await response.body?.cancel();
      return { binding, error: `Binding '${binding}' answered HTTP ${response.status}` };
    }
    const data: unknown = await response.json().catch(() => null);
    if (typeof data !== "object" || data === null || Array.isArray(data)) {
      return { binding, error: `Binding '${binding}' is not a sandbox-workers runtime Worker` };
    }
    const info = data as JsonObject;
    const protocol = info.protocol === undefined ? 1 : info.protocol;
    if (
      typeof info.language !== "string" ||
      typeof info.engine !== "string" ||
      typeof info.contexts !== "boolean" ||
      typeof protocol !== "number"
    ) {
      return { binding, error: `Binding '${binding}' is not a sandbox-workers runtime Worker` };
    }
    return { binding, language: info.language, engine: info.engine, contexts: info.contexts, protocol };
  } catch (error) {
    return { binding, error: `Binding '${binding}' failed: ${errorMessage(error)}` };
  }
}

/**
 * Every configured runtime binding, probed: one entry per binding that answers a
 * well-formed `GET /interpreter`. A binding that is missing, fails, or answers anything else
 * is left out of `runtimes` (clients read every entry as a usable runtime) and listed instead
 * under `unavailable: [{ binding, error }]`, a key present only when something is unavailable.
 * A runtime speaking another interpreter `protocol` is listed as it reports itself: the core
 * refuses to create contexts on it, and clients warn (compare `core.interpreterProtocol`).
 */
async function probeRuntimes(env: Env): Promise<JsonObject> {
  const probes = await Promise.all(runtimeBindings(env).map((binding) => probeRuntime(env, binding)));
  const runtimes: RuntimeEntry[] = [];
  const unavailable: UnavailableRuntime[] = [];
  for (const probe of probes) {
    if ("error" in probe) unavailable.push(probe);
    else runtimes.push(probe);
  }
  return unavailable.length > 0 ? { runtimes, unavailable } : { runtimes };
}

/** `GET /v1/runtimes`: the probed runtimes and the core that talks to them. */
async function listRuntimes(env: Env): Promise<Response> {
  return json(200, { ...(await probeRuntimes(env)), core: coreInfo() });
}

/**
 * `GET /v1/health` (no auth): this gateway's, its core's and every runtime's versions.
 * `sandbox-must-exist` is listed only to a request that carried its header: a proxy in
 * between that drops the header then hides the feature rather than ignore it.
 */
async function health(request: Request, env: Env): Promise<Response> {
  const features = FEATURES.filter(
    (name) => name !== MUST_EXIST_FEATURE || mustExist(request),
  );
  return json(200, {
    ok: true,
    version: VERSION,
    protocol: PROTOCOL,
    core: coreInfo(),
    ...(await probeRuntimes(env)),
    features,
    filesBatch: { maxEntries: FILES_BATCH_MAX_ENTRIES, maxBytes: FILES_BATCH_BODY_CAP },
  });
}

/**
 * `POST /v1/runtimes/:binding/execute`: stateless execution (spec 2.2.1). The gateway
 * applies rows 1-4 of the validation order itself (415, 413 declared, 400 body absent,
 * 413 streamed) so a huge body never crosses the Service Binding; the runtime Worker
 * applies every other row and its answer is relayed (status and body).
 */
async function executeStateless(request: Request, env: Env, rawBinding: string): Promise<Response> {
  const binding = decodeSegment(rawBinding);
  const fetcher = runtimeFetcher(env, binding);
  if (fetcher === undefined) throw new HttpError(400, `Unknown binding '${binding}'`);
  const contentType = request.headers.get("content-type") ?? "";
  if (!contentType.toLowerCase().startsWith("application/json")) {
    throw new HttpError(415, "Content-Type must be application/json");
  }
  const body = await readBody(request, SMALL_BODY_CAP);
  if (body === null) throw new HttpError(400, "JSON body required");
  let response: Response;
  try {
    response = await fetcher.fetch(
      new Request(`${INTERNAL_ORIGIN}/execute`, {
        method: "POST",
        headers: { "content-type": contentType },
        body,
      }),
    );
  } catch (error) {
    console.error(`Binding '${binding}' failed`, error);
    return errorResponse("INTERNAL_ERROR", "Engine execution failed", 502);
  }
  return relay(response);
}

/** Relay an upstream answer's status and body; JSON content type and no-store. */
function relay(response: Response): Response {
  return new Response(response.body, {
    status: response.status,
    headers: {
      "content-type": response.headers.get("content-type") ?? "application/json",
      "cache-control": "no-store",
    },
  });
}

// ---------------------------------------------------------------------------------------
// Sandboxes

interface SandboxRoute {
  methods: string[];
  /** Body cap of the POST method, if any. */
  cap: number;
}

/** The Sandbox routes of spec 2.4 (path after `/v1/sandboxes/:id`), or null when unknown. */
function sandboxRoute(rest: string): SandboxRoute | null {
  if (rest === "" || rest === "/") return { methods: ["GET", "DELETE"], cap: 0 };
  if (rest === "/execute") return { methods: ["POST"], cap: SMALL_BODY_CAP };
  if (rest === "/contexts") return { methods: ["GET", "POST"], cap: SMALL_BODY_CAP };
  if (/^\/contexts\/[^/]+$/.test(rest)) return { methods: ["DELETE"], cap: 0 };
  if (rest === "/env") return { methods: ["POST"], cap: SMALL_BODY_CAP };
  if (rest === "/files") return { methods: ["POST"], cap: FILES_BODY_CAP };
  return null;
}

function registry(env: Env): DurableObjectStub<SandboxRegistry> {
  return env.REGISTRY.get(env.REGISTRY.idFromName(REGISTRY_NAME));
}

async function listSandboxes(env: Env): Promise<Response> {
  let sandboxes: SandboxEntry[];
  try {
    sandboxes = await registry(env).list(Date.now());
  } catch (error) {
    console.error("Sandbox registry failed", error);
    return errorResponse("INTERNAL_ERROR", `Sandbox registry failed: ${errorMessage(error)}`, 502);
  }
  return json(200, { sandboxes });
}

async function sandboxRequest(request: Request, env: Env, rawId: string, rest: string): Promise<Response> {
  const id = decodeSegment(rawId);
  const idError = sandboxIdError(id);
  if (idError !== null) throw new HttpError(400, idError);
  await requireRegistered(request, env, id);
  if (rest === "/files/batch") {
    allow(request, "POST");
    return filesBatch(request, env, id);
  }
  const route = sandboxRoute(rest);
  if (route === null) throw notFound();
  allow(request, ...route.methods);

  const method = request.method;
  const path = rest === "" ? "/" : rest;
  const body = method === "POST" ? ((await readBody(request, route.cap)) ?? new Uint8Array(0)) : undefined;
  const init: RequestInit = {
    method,
    headers: {
      "content-type": request.headers.get("content-type") ?? "application/json",
      "x-sandbox-id": id,
    },
  };
  if (body !== undefined) init.body = body;
  const stub = env.Sandbox.get(env.Sandbox.idFromName(id));
  const response = await stub.fetch(new Request(INTERNAL_ORIGIN + path, init));
  // Taken after the answer, so lastUsed is never before the Sandbox's own createdAt.
  if (response.ok) await updateRegistry(env, id, method, path, response, Date.now());
  return relay(response);
}

/**
 * A request sent with `x-sandbox-must-exist: 1` goes on only while the registry holds its
 * sandbox, else 404 `SANDBOX_NOT_FOUND` and nothing reaches the Sandbox (which would make
 * it, spec 2.4). Not atomic: the `Sandbox` of the core has no such check, so a DELETE
 * through this gateway between this check and the request's own call (or whose call ended
 * but whose `forget` has not yet run) lets the request make the sandbox again; and the
 * registry knows only what this gateway made (docs/gateway-protocol.md).
 */
async function requireRegistered(request: Request, env: Env, id: string): Promise<void> {
  if (!mustExist(request)) return;
  let registered: boolean;
  try {
    registered = await registry(env).holds(id, Date.now());
  } catch (error) {
    console.error("Sandbox registry failed", error);
    throw new HttpError(502, `Sandbox registry failed: ${errorMessage(error)}`, "INTERNAL_ERROR");
  }
  if (!registered) {
    throw new HttpError(404, `Sandbox '${id}' not found`, "SANDBOX_NOT_FOUND", { sandboxId: id });
  }
}

/**
 * `POST /v1/sandboxes/:id/files/batch`: the body checks of `serve` in its order (413, 415,
 * gzip, JSON, `entries`), then every entry in order as its own `/files` call (see
 * src/files-batch.ts). A call that throws ends the request with 502; the entries before
 * it stay applied, and every entry may be sent again.
 */
async function filesBatch(request: Request, env: Env, id: string): Promise<Response> {
  const raw = (await readBody(request, FILES_BATCH_BODY_CAP)) ?? new Uint8Array(0);
  const decoded = await decodeBody(raw, request.headers.get("content-encoding"), FILES_BATCH_BODY_CAP);
  let body: unknown;
  try {
    body = JSON.parse(new TextDecoder().decode(decoded));
  } catch {
    throw new HttpError(400, "Invalid JSON");
  }
  if (!isObject(body)) throw new HttpError(400, "Expected an object");
  const entries = body.entries;
  if (!Array.isArray(entries)) throw new HttpError(400, "entries must be an array");
  if (entries.length > FILES_BATCH_MAX_ENTRIES) {
    throw new HttpError(413, `Too many entries: at most ${FILES_BATCH_MAX_ENTRIES} per batch`);
  }
  const stub = env.Sandbox.get(env.Sandbox.idFromName(id));
  const files = (entry: unknown): Promise<Response> =>
    stub.fetch(
      new Request(`${INTERNAL_ORIGIN}/files`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-sandbox-id": id },
        body: JSON.stringify(entry),
      }),
    );
  const timestamp = new Date().toISOString();
  let results: JsonObject[];
  try {
    results = await applyBatch(entries, files, timestamp);
  } catch (error) {
    console.error(`Sandbox '${id}' failed during a files batch`, error);
    return errorResponse("INTERNAL_ERROR", `Sandbox call failed: ${errorMessage(error)}`, 502);
  }
  const answer: JsonObject = { results, timestamp };
  const createdAt = await sandboxCreatedAt(stub, id);
  if (createdAt !== undefined) answer.sandboxCreatedAt = createdAt;
  const response = json(200, answer);
  await updateRegistry(env, id, "POST", "/files/batch", response, Date.now());
  return response;
}

/**
 * When the sandbox was made (`GET /` of its object), or undefined when that call fails:
 * a client holds each batch's answer to it, to notice a sandbox destroyed and made again
 * since its last batch (docs/gateway-protocol.md, "Batches of file changes").
 */
async function sandboxCreatedAt(stub: DurableObjectStub, id: string): Promise<string | undefined> {
  try {
    const response = await stub.fetch(
      new Request(`${INTERNAL_ORIGIN}/`, { method: "GET", headers: { "x-sandbox-id": id } }),
    );
    if (!response.ok) return undefined;
    const info: unknown = await response.json();
    return isObject(info) && typeof info.createdAt === "string" ? info.createdAt : undefined;
  } catch {
    return undefined;
  }
}

/** Registry bookkeeping after a successful sandbox route; never fails the request. */
async function updateRegistry(
  env: Env,
  id: string,
  method: string,
  path: string,
  response: Response,
  now: number,
): Promise<void> {
  try {
    if (method === "DELETE" && path === "/") {
      await registry(env).forget(id);
      return;
    }
    let expiresAt: number | null | undefined;
    let createdAt: number | undefined;
    if ((method === "GET" && path === "/") || path === "/execute") {
      const data: unknown = await response.clone().json().catch(() => null);
      if (typeof data === "object" && data !== null) {
        const body = data as JsonObject;
        if (path === "/") {
          // SandboxInfo (spec 8.2): expiresAt is the armed deadline, null when disabled.
          if (typeof body.expiresAt === "number" || body.expiresAt === null) expiresAt = body.expiresAt;
          if (typeof body.createdAt === "string") {
            const parsed = Date.parse(body.createdAt);
            if (Number.isFinite(parsed)) createdAt = parsed;
          }
        } else {
          // Context execution (spec 2.4.1): context.expiresAt, omitted when expiry is off.
          // The stateless fallback carries no context: the deadline is predicted instead.
          const context = body.context;
          if (typeof context === "object" && context !== null) {
            const reported = (context as JsonObject).expiresAt;
            expiresAt = typeof reported === "number" ? reported : null;
          }
        }
      }
    }
    const input: Parameters<SandboxRegistry["touch"]>[0] = {
      id,
      now,
      ttlMs: idleTtlMs(env.SANDBOX_IDLE_TTL_MS),
    };
    if (expiresAt !== undefined) input.expiresAt = expiresAt;
    if (createdAt !== undefined) input.createdAt = createdAt;
    await registry(env).touch(input);
  } catch (error) {
    console.error(`Sandbox registry update failed for '${id}'`, error);
  }
}

// ---------------------------------------------------------------------------------------
// Routing

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

async function route(request: Request, env: Env): Promise<Response> {
  const path = new URL(request.url).pathname;
  if (path === "/v1/health") {
    allow(request, "GET");
    return health(request, env);
  }
  await authenticate(request, env);
  if (path === "/v1/runtimes") {
    allow(request, "GET");
    return listRuntimes(env);
  }
  const runtime = /^\/v1\/runtimes\/([^/]+)\/execute$/.exec(path);
  if (runtime !== null) {
    allow(request, "POST");
    return executeStateless(request, env, runtime[1] ?? "");
  }
  if (path === "/v1/sandboxes") {
    allow(request, "GET");
    return listSandboxes(env);
  }
  const sandbox = /^\/v1\/sandboxes\/([^/]+)((?:\/.*)?)$/.exec(path);
  if (sandbox !== null) {
    return sandboxRequest(request, env, sandbox[1] ?? "", sandbox[2] ?? "");
  }
  throw notFound();
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    try {
      return await route(request, env);
    } catch (error) {
      if (error instanceof HttpError) return error.toResponse();
      console.error("Unexpected gateway failure", error);
      return errorResponse("INTERNAL_ERROR", "Engine execution failed", 502);
    }
  },
} satisfies ExportedHandler<Env>;
