// `POST /v1/sandboxes/:id/files/batch`, an extension of the workbench gateway protocol
// (docs/gateway-protocol.md, "Batches of file changes"): many changing files-API requests
// in one, so a client far away pays one round trip for them.
//
// The `Sandbox` Durable Object of `@sandbox-workers/core` has only the per-op `POST /files`,
// so this Worker applies the entries one by one, in order, each as its own `/files` call:
// every entry gets exactly the answer that call gives, but there is no transaction around
// them (the local backend and `serve` store a batch in one). A precondition is checked with
// a `list` of the entry's parent directory just before its call.

import { isObject, type JsonObject } from "./http";

/** One `POST /files` call to the sandbox's Durable Object with this JSON body. */
export type FilesCall = (body: unknown) => Promise<Response>;

const FILES_OPS = new Set(["read", "write", "mkdir", "delete", "rename", "move", "list", "exists"]);
const OPERATIONS: Record<string, string> = {
  write: "file.write",
  mkdir: "directory.create",
  delete: "file.delete",
  rename: "file.rename",
  move: "file.move",
};

interface FileState {
  type: string;
  size: number;
  modifiedAt: string;
}

/** `ifMatch` (a file of this size and `modifiedAt`), `ifNoneMatch: "*"` (nothing there), or none. */
type Precondition = { kind: "none" } | { kind: "absent" } | { kind: "match"; size: number; modifiedAt: string };

function errorBody(
  code: string,
  message: string,
  httpStatus: number,
  timestamp: string,
  context: JsonObject = {},
  operation?: string,
): JsonObject {
  const body: JsonObject = { code, message, context, httpStatus, timestamp };
  if (operation !== undefined) body.operation = operation;
  return body;
}

class EntryRefused extends Error {}

/** Every entry in order; one `{ ok, result | error }` per entry. */
export async function applyBatch(entries: unknown[], files: FilesCall, timestamp: string): Promise<JsonObject[]> {
  const results: JsonObject[] = [];
  for (const entry of entries) {
    try {
      results.push(await applyEntry(entry, files, timestamp));
    } catch (error) {
      if (!(error instanceof EntryRefused)) throw error;
      results.push({ ok: false, error: errorBody("VALIDATION_FAILED", error.message, 400, timestamp) });
    }
  }
  return results;
}

async function applyEntry(entry: unknown, files: FilesCall, timestamp: string): Promise<JsonObject> {
  if (!isObject(entry) || typeof entry.op !== "string" || !FILES_OPS.has(entry.op)) {
    return relay(files, entry, timestamp); // the Durable Object answers what is wrong with it
  }
  const op = entry.op;
  const operation = OPERATIONS[op];
  if (operation === undefined) throw new EntryRefused("op must be write, mkdir, delete, rename or move in a batch");
  const { ifMatch, ifNoneMatch, ...body } = entry;
  const precondition = parsePrecondition(op, ifMatch, ifNoneMatch);
  if (precondition.kind !== "none" && wellFormed(body, op)) {
    const failed = await checkPrecondition(files, String(body.path), operation, precondition, timestamp);
    if (failed !== null) return failed;
  }
  return relay(files, body, timestamp);
}

function parsePrecondition(op: string, ifMatch: unknown, ifNoneMatch: unknown): Precondition {
  if (ifMatch == null && ifNoneMatch == null) return { kind: "none" };
  if (op === "mkdir") throw new EntryRefused("mkdir takes no precondition");
  if (ifMatch != null && ifNoneMatch != null) throw new EntryRefused("Pass ifMatch or ifNoneMatch, not both");
  if (ifNoneMatch != null) {
    if (ifNoneMatch !== "*") throw new EntryRefused('ifNoneMatch must be "*"');
    return { kind: "absent" };
  }
  const size = isObject(ifMatch) ? ifMatch.size : undefined;
  const modifiedAt = isObject(ifMatch) ? ifMatch.modifiedAt : undefined;
  if (typeof size !== "number" || !Number.isInteger(size) || size < 0 || typeof modifiedAt !== "string") {
    throw new EntryRefused("ifMatch must be an object with size (an integer >= 0) and modifiedAt (a string)");
  }
  return { kind: "match", size, modifiedAt };
}

/** The entry passes the files API's own field checks (else that call reports them first). */
function wellFormed(body: JsonObject, op: string): boolean {
  const nonEmpty = (value: unknown): boolean => typeof value === "string" && value !== "";
  if (!nonEmpty(body.path)) return false;
  if ((op === "rename" || op === "move") && !nonEmpty(body.newPath)) return false;
  return !("encoding" in body) || body.encoding === "utf-8" || body.encoding === "base64";
}

/** Spec 6.2: the segments of `path` below /workspace, or null when it names no place there. */
function workspaceSegments(path: string): string[] | null {
  const parts: string[] = [];
  for (const segment of (path.startsWith("/") ? path : `/workspace/${path}`).split("/")) {
    if (segment === "" || segment === ".") continue;
    if (segment === "..") {
      if (parts.length === 0) return null;
      parts.pop();
      continue;
    }
    parts.push(segment);
  }
  return parts[0] === "workspace" ? parts.slice(1) : null;
}

/** A failed precondition's result, or null when it holds (or the operation fails anyway). */
async function checkPrecondition(
  files: FilesCall,
  path: string,
  operation: string,
  expected: Precondition,
  timestamp: string,
): Promise<JsonObject | null> {
  const segments = workspaceSegments(path);
  if (segments === null || segments.length === 0) return null; // escapes, or the root: the call fails
  const found = await stateAt(files, segments, timestamp);
  if ("error" in found) return { ok: false, error: found.error };
  const current = found.state;
  let reason: string;
  if (expected.kind === "absent") {
    if (current === null) return null;
    reason = "already exists";
  } else if (current === null) {
    reason = "does not exist";
  } else if (current.type === "directory") {
    reason = "is a directory";
  } else if (expected.kind === "match" && current.size === expected.size && current.modifiedAt === expected.modifiedAt) {
    return null;
  } else {
    reason = `changed (size ${current.size}, modifiedAt ${current.modifiedAt})`;
  }
  const context = { path, operation, current };
  const message = `Precondition failed: ${path} ${reason}`;
  return { ok: false, error: errorBody("PRECONDITION_FAILED", message, 412, timestamp, context, operation) };
}

/** What the parent's `list` reports for the entry (state null: nothing there). */
async function stateAt(
  files: FilesCall,
  segments: string[],
  timestamp: string,
): Promise<{ state: FileState | null } | { error: JsonObject }> {
  const parent = ["/workspace", ...segments.slice(0, -1)].join("/");
  const name = segments[segments.length - 1];
  const response = await files({ op: "list", path: parent, includeHidden: true });
  const data: unknown = await response.json().catch(() => null);
  if (!response.ok) {
    if (isObject(data) && (data.code === "FILE_NOT_FOUND" || data.code === "NOT_DIRECTORY")) return { state: null };
    return { error: answerError(data, response.status, timestamp) };
  }
  const listed = isObject(data) && Array.isArray(data.files) ? data.files : [];
  const entry = listed.find((file: unknown) => isObject(file) && file.name === name);
  if (!isObject(entry)) return { state: null };
  return { state: { type: String(entry.type), size: Number(entry.size), modifiedAt: String(entry.modifiedAt) } };
}

/** The entry as one `POST /files` call, its answer as the entry's result. */
async function relay(files: FilesCall, body: unknown, timestamp: string): Promise<JsonObject> {
  const response = await files(body);
  const data: unknown = await response.json().catch(() => null);
  if (response.ok) return { ok: true, result: data };
  return { ok: false, error: answerError(data, response.status, timestamp) };
}

function answerError(data: unknown, status: number, timestamp: string): JsonObject {
  if (isObject(data) && typeof data.code === "string" && typeof data.message === "string") return data;
  return errorBody("INTERNAL_ERROR", `HTTP ${status}`, status, timestamp);
}
