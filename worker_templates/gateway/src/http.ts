// HTTP helpers of the gateway Worker: errors as `ErrorResponse` JSON, and request bodies
// read within a cap (and decoded from gzip where a route accepts it).

const DRAIN_LIMIT = 8 * 1_048_576; // bytes of an oversized body read before cancelling it

export type JsonObject = Record<string, unknown>;

export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string = "VALIDATION_FAILED",
    readonly context: JsonObject = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  toResponse(): Response {
    return errorResponse(this.code, this.message, this.status, {
      context: this.context,
      headers: this.headers,
    });
  }
}

/** A JSON answer; every JSON response carries `cache-control: no-store`. */
export function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: {
      "content-type": "application/json",
      "cache-control": "no-store",
      ...headers,
    },
  });
}

/** An `ErrorResponse` (spec 4.1): `{ code, message, context, httpStatus, timestamp, operation? }`. */
export function errorResponse(
  code: string,
  message: string,
  httpStatus: number,
  options: { context?: JsonObject; operation?: string; headers?: Record<string, string> } = {},
): Response {
  const body: JsonObject = {
    code,
    message,
    context: options.context ?? {},
    httpStatus,
    timestamp: new Date().toISOString(),
  };
  if (options.operation !== undefined) body.operation = options.operation;
  return json(httpStatus, body, options.headers);
}

export const notFound = (): HttpError => new HttpError(404, "Not found");

export function allow(request: Request, ...methods: string[]): void {
  if (!methods.includes(request.method)) {
    throw new HttpError(405, "Method not allowed", "VALIDATION_FAILED", {}, { allow: methods.join(", ") });
  }
}

// ---------------------------------------------------------------------------------------
// Request bodies

/**
 * Read a request body, enforcing `cap` on the declared `content-length` and on the bytes
 * actually streamed (413 `Request too large`). `null` when the request has no body.
 */
export async function readBody(request: Request, cap: number): Promise<Uint8Array | null> {
  const declared = request.headers.get("content-length");
  if (declared !== null && /^\d+$/.test(declared.trim()) && Number(declared) > cap) {
    throw new HttpError(413, "Request too large");
  }
  if (request.body === null) return null;
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > cap) {
      await discardRest(reader, total);
      throw new HttpError(413, "Request too large");
    }
    chunks.push(value);
  }
  return concatenated(chunks, total);
}

function concatenated(chunks: Uint8Array[], total: number): Uint8Array {
  const joined = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    joined.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return joined;
}

/**
 * Drain what remains of an oversized body (up to DRAIN_LIMIT bytes in all), then cancel.
 * Answering while the client is still uploading leaves the connection in a state that
 * `wrangler dev` 4.40 reports as "Your worker restarted mid-request" on the next request;
 * draining a bounded amount avoids that without reading an endless upload.
 */
async function discardRest(reader: ReadableStreamDefaultReader<Uint8Array>, read: number): Promise<void> {
  try {
    let total = read;
    while (total <= DRAIN_LIMIT) {
      const { done, value } = await reader.read();
      if (done) return;
      total += value.byteLength;
    }
    await reader.cancel();
  } catch {
    // The client went away: nothing left to discard.
  }
}

/**
 * A body without its `Content-Encoding` (identity or gzip, else 415), decoded no further
 * than `cap` bytes (413), so a small compressed body cannot expand without bound.
 */
export async function decodeBody(body: Uint8Array, encoding: string | null, cap: number): Promise<Uint8Array> {
  const name = (encoding ?? "identity").trim().toLowerCase();
  if (name === "" || name === "identity") return body;
  if (name !== "gzip") throw new HttpError(415, "Content-Encoding must be gzip or identity");
  const reader = new Blob([body]).stream().pipeThrough(new DecompressionStream("gzip")).getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > cap) {
        await reader.cancel();
        throw new HttpError(413, "Request too large");
      }
      chunks.push(value);
    }
  } catch (error) {
    if (error instanceof HttpError) throw error;
    throw new HttpError(400, "Invalid gzip body");
  }
  return concatenated(chunks, total);
}
