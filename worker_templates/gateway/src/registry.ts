// The sandbox registry: which sandboxes this gateway created and has not seen destroyed or
// expired (`GET /v1/sandboxes`). One SQLite-backed Durable Object instance, named
// "registry", called over Workers RPC by the gateway's fetch handler.
//
// Semantics (docs/gateway-protocol.md, GET /v1/sandboxes):
// - `touch` runs after every successful (2xx) sandbox route except `DELETE /v1/sandboxes/:id`.
//   The first touch records the id with `createdAt = lastUsed = now`; later touches move
//   `lastUsed` (the gateway's own clock: the time of the last successful request, not the
//   Sandbox's throttled `SandboxInfo.lastUsed`).
// - `expiresAt` is taken from the answer when it carries one (`SandboxInfo.expiresAt` of
//   `GET /v1/sandboxes/:id`, `context.expiresAt` of a context execution). Otherwise the
//   registry replays the Sandbox's own touch policy (spec 8.3): `want = now + TTL`; the
//   deadline moves to `want` only when nothing is armed or `want - armed > TTL / 10`.
//   TTL "0" means no expiry (`expiresAt: null`).
// - `forget` runs after a successful `DELETE /v1/sandboxes/:id`.
// - `list` drops (and deletes) entries whose `expiresAt` has passed: Cloudflare destroys
//   idle sandboxes itself (the Sandbox's alarm), and nobody tells the registry.
// - `holds` says whether `list` would list an id now: a request sent only if its sandbox
//   exists (`x-sandbox-must-exist`) goes on only then.
// - A touch on an entry that had already expired means the request re-created the sandbox:
//   its `createdAt` restarts.

import { DurableObject } from "cloudflare:workers";

export interface SandboxEntry {
  id: string;
  /** ISO-8601 (`Date#toISOString()`). */
  createdAt: string;
  /** ISO-8601: the last successful request this gateway forwarded to the sandbox. */
  lastUsed: string;
  /** Epoch milliseconds of the (known or predicted) idle deadline; null when expiry is off. */
  expiresAt: number | null;
}

export interface TouchInput {
  id: string;
  /** Epoch milliseconds of the successful request. */
  now: number;
  /** The gateway's `SANDBOX_IDLE_TTL_MS`, parsed per spec 8.3 (0 = no expiry). */
  ttlMs: number;
  /** The deadline the Sandbox reported; `undefined` when the answer did not say. */
  expiresAt?: number | null;
  /** The Sandbox's own `createdAt` (epoch ms) when the answer carried it. */
  createdAt?: number;
}

type Row = {
  id: string;
  created_at: number;
  last_used: number;
  expires_at: number | null;
};

export class SandboxRegistry extends DurableObject<unknown> {
  private readonly sql: SqlStorage;

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(
      `CREATE TABLE IF NOT EXISTS sandboxes (
         id TEXT PRIMARY KEY,
         created_at INTEGER NOT NULL,
         last_used INTEGER NOT NULL,
         expires_at INTEGER
       )`,
    );
  }

  touch(input: TouchInput): SandboxEntry {
    const { id, now, ttlMs } = input;
    const previous = this.sql
      .exec<Row>("SELECT id, created_at, last_used, expires_at FROM sandboxes WHERE id = ?", id)
      .toArray()[0];
    const alive =
      previous !== undefined && (previous.expires_at === null || previous.expires_at > now);
    let expiresAt: number | null;
    if (input.expiresAt !== undefined) {
      expiresAt = input.expiresAt;
    } else if (ttlMs <= 0) {
      expiresAt = null;
    } else {
      const armed = alive ? previous.expires_at : null;
      const want = now + ttlMs;
      expiresAt = armed === null || want - armed > ttlMs / 10 ? want : armed;
    }
    const createdAt = input.createdAt ?? (alive ? previous.created_at : now);
    this.sql.exec(
      `INSERT INTO sandboxes (id, created_at, last_used, expires_at) VALUES (?, ?, ?, ?)
       ON CONFLICT(id) DO UPDATE SET
         created_at = excluded.created_at,
         last_used = excluded.last_used,
         expires_at = excluded.expires_at`,
      id,
      createdAt,
      now,
      expiresAt,
    );
    return toEntry({ id, created_at: createdAt, last_used: now, expires_at: expiresAt });
  }

  forget(id: string): boolean {
    const cursor = this.sql.exec("DELETE FROM sandboxes WHERE id = ?", id);
    return cursor.rowsWritten > 0;
  }

  holds(id: string, now: number): boolean {
    const row = this.sql
      .exec<{ expires_at: number | null }>("SELECT expires_at FROM sandboxes WHERE id = ?", id)
      .toArray()[0];
    return row !== undefined && (row.expires_at === null || row.expires_at > now);
  }

  list(now: number): SandboxEntry[] {
    this.sql.exec("DELETE FROM sandboxes WHERE expires_at IS NOT NULL AND expires_at <= ?", now);
    return this.sql
      .exec<Row>(
        "SELECT id, created_at, last_used, expires_at FROM sandboxes ORDER BY created_at, id",
      )
      .toArray()
      .map(toEntry);
  }
}

function toEntry(row: Row): SandboxEntry {
  return {
    id: row.id,
    createdAt: new Date(row.created_at).toISOString(),
    lastUsed: new Date(row.last_used).toISOString(),
    expiresAt: row.expires_at,
  };
}
