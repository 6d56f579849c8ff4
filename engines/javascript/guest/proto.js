// Hand-written protobuf codec for exactly the envelope messages (engines/proto/envelope.proto):
// decode ExecuteRequest, encode ExecuteResponse. No protobuf runtime inside the guest.

const utf8 = new TextDecoder('utf-8');
const utf8Encoder = new TextEncoder();

class Reader {
  constructor(bytes) {
    this.bytes = bytes;
    this.pos = 0;
  }

  get done() {
    return this.pos >= this.bytes.length;
  }

  varint() {
    // Values we read fit in 53 bits (lengths, uint32, bool); wider varints are still consumed.
    let result = 0;
    let scale = 1;
    for (;;) {
      if (this.pos >= this.bytes.length) throw new Error('truncated varint');
      const byte = this.bytes[this.pos++];
      result += (byte & 0x7f) * scale;
      if (byte < 0x80) return result;
      scale *= 128;
    }
  }

  chunk() {
    const length = this.varint();
    const end = this.pos + length;
    if (end > this.bytes.length) throw new Error('truncated field');
    const slice = this.bytes.subarray(this.pos, end);
    this.pos = end;
    return slice;
  }

  string() {
    return utf8.decode(this.chunk());
  }

  skip(wireType) {
    if (wireType === 0) this.varint();
    else if (wireType === 1) this.pos += 8;
    else if (wireType === 2) this.chunk();
    else if (wireType === 5) this.pos += 4;
    else throw new Error(`unsupported wire type ${wireType}`);
  }
}

function decodeEnvEntry(bytes, env) {
  const reader = new Reader(bytes);
  let key = '';
  let value = '';
  while (!reader.done) {
    const tag = reader.varint();
    const field = Math.floor(tag / 8);
    const wireType = tag & 7;
    if (field === 1 && wireType === 2) key = reader.string();
    else if (field === 2 && wireType === 2) value = reader.string();
    else reader.skip(wireType);
  }
  env[key] = value;
}

/** Decode an ExecuteRequest into a plain object with proto3 defaults. */
export function decodeRequest(bytes) {
  const request = {
    code: '',
    env: Object.create(null),
    session: false,
    cwd: '',
    resultLimit: 0,
    consoleLimitUnits: 0,
    consoleLimitEntries: 0,
  };
  const reader = new Reader(bytes);
  while (!reader.done) {
    const tag = reader.varint();
    const field = Math.floor(tag / 8);
    const wireType = tag & 7;
    if (field === 1 && wireType === 2) request.code = reader.string();
    else if (field === 2 && wireType === 2) decodeEnvEntry(reader.chunk(), request.env);
    else if (field === 3 && wireType === 0) request.session = reader.varint() !== 0;
    else if (field === 4 && wireType === 2) request.cwd = reader.string();
    else if (field === 5 && wireType === 0) request.resultLimit = reader.varint();
    else if (field === 6 && wireType === 0) request.consoleLimitUnits = reader.varint();
    else if (field === 7 && wireType === 0) request.consoleLimitEntries = reader.varint();
    else reader.skip(wireType);
  }
  return request;
}

class Writer {
  constructor() {
    this.parts = [];
    this.length = 0;
  }

  push(bytes) {
    this.parts.push(bytes);
    this.length += bytes.length;
  }

  varint(value) {
    const out = [];
    let rest = value;
    while (rest >= 0x80) {
      out.push((rest % 128) | 0x80);
      rest = Math.floor(rest / 128);
    }
    out.push(rest);
    this.push(Uint8Array.from(out));
  }

  tag(field, wireType) {
    this.varint(field * 8 + wireType);
  }

  bytes(field, bytes) {
    this.tag(field, 2);
    this.varint(bytes.length);
    this.push(bytes);
  }

  string(field, text) {
    this.bytes(field, utf8Encoder.encode(text));
  }

  finish() {
    const out = new Uint8Array(this.length);
    let offset = 0;
    for (const part of this.parts) {
      out.set(part, offset);
      offset += part.length;
    }
    return out;
  }
}

/**
 * Encode an ExecuteResponse from {result?: {text?|json?}, error?: {name, message, traceback},
 * console: [{stream: 0|1, text}], cwd}.
 */
export function encodeResponse(response) {
  const writer = new Writer();
  if (response.result) {
    const inner = new Writer();
    if (response.result.json !== undefined) inner.string(2, response.result.json);
    else inner.string(1, response.result.text);
    writer.bytes(1, inner.finish());
  }
  if (response.error) {
    const inner = new Writer();
    inner.string(1, response.error.name);
    inner.string(2, response.error.message);
    for (const line of response.error.traceback) inner.string(3, line);
    writer.bytes(2, inner.finish());
  }
  for (const line of response.console) {
    const inner = new Writer();
    if (line.stream) {
      inner.tag(1, 0);
      inner.varint(line.stream);
    }
    inner.string(2, line.text);
    writer.bytes(3, inner.finish());
  }
  if (response.cwd) writer.string(4, response.cwd);
  return writer.finish();
}
