// JavaScript guest driver (StarlingMonkey/SpiderMonkey, built with componentize-js).
// Export `run(request) -> response` with protobuf envelopes. Implements spec 3.2 (result
// mapping), 3.3 (errors), 3.4 (console), 7.8 (session REPL), 9.2 (console/result limits,
// enforced here in UTF-16 units), 9.4 (stateless rewrite) and 10.2 (process.env).
// Guest-level failures never escape `run`: they become `ExecuteResponse.error`.
import './intl.js';
import { decodeRequest, encodeResponse } from './proto.js';
import { fs, getCwd, chdir, resetCwd, reportedCwd } from './fs.js';
import { DECLARE_FUNCTION, rewriteStateless, rewriteSession } from './rewrite.js';
import { IMPORT_FUNCTION, importFromWorkspace, loadErrors, mountWorkspace } from './modules.js';

const globalEval = globalThis.eval;
const DEFAULT_RESULT_LIMIT = 65536;
const DEFAULT_CONSOLE_UNITS = 32768;
const DEFAULT_CONSOLE_ENTRIES = 200;
const TRACEBACK_CHARS = 8192;
const NEVER_SETTLED =
  'Execution did not complete: a promise never settled ' +
  '(timers and indefinitely pending promises are unsupported)';

// Keep a private timer for detecting unsettled promises, then remove what the reference
// denies (spec 9.3): timers, network, shared memory.
const scheduleTask = globalThis.setTimeout;
for (const name of [
  'setTimeout',
  'setInterval',
  'clearTimeout',
  'clearInterval',
  'fetch',
  'SharedArrayBuffer',
  'Atomics',
]) {
  delete globalThis[name];
}

class ExecutionLimitError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ExecutionLimitError';
  }
}

// ---- console (spec 3.4, 9.2) -------------------------------------------------------------

const STDOUT = 0;
const STDERR = 1;
let logs = [];
let logUnits = 0;
let unitLimit = DEFAULT_CONSOLE_UNITS;
let entryLimit = DEFAULT_CONSOLE_ENTRIES;
let consoleExceeded = null;

function renderArgument(value) {
  if (typeof value === 'string') return value;
  if (typeof value === 'bigint') return `${value}n`;
  try {
    const text = JSON.stringify(value);
    if (text !== undefined) return text;
  } catch {
    // fall back to String below
  }
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

function writeConsole(stream, args) {
  if (consoleExceeded) throw consoleExceeded;
  let text = args.map(renderArgument).join(' ');
  if (text.endsWith('\n')) text = text.slice(0, -1);
  if (logs.length + 1 > entryLimit || logUnits + text.length > unitLimit) {
    consoleExceeded = new ExecutionLimitError('Console output limit exceeded');
    throw consoleExceeded;
  }
  logs.push({ stream, text });
  logUnits += text.length;
  // The entry also goes out through the runtime's own console (WASI stdout/stderr), so
  // the host can stream it while the run lasts; the answer's `console` stays the record.
  (stream === STDOUT ? hostConsole.log : hostConsole.error).call(hostConsole, text);
}

const hostConsole = globalThis.console;
const consoleObject = {};
for (const [name, stream] of [
  ['log', STDOUT],
  ['info', STDOUT],
  ['debug', STDOUT],
  ['dir', STDOUT],
  ['trace', STDERR],
  ['warn', STDERR],
  ['error', STDERR],
]) {
  consoleObject[name] = (...args) => writeConsole(stream, args);
}
globalThis.console = consoleObject;

// ---- result mapping (spec 3.2) -----------------------------------------------------------

function quote(text) {
  return `'${text.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

function bigintReplacer(_key, value) {
  return typeof value === 'bigint' ? `${value}n` : value;
}

/** The Result entry for `value`, or null for undefined. Throws (e.g. circular TypeError). */
function toResult(value) {
  if (value === undefined) return null;
  if (typeof value === 'string') return { text: quote(value) };
  if (typeof value === 'bigint') return { text: `${value}n` };
  if (value !== null && typeof value === 'object') {
    const json = JSON.stringify(value, bigintReplacer);
    if (json !== undefined) return { json };
  }
  return { text: String(value) };
}

function resultUnits(result) {
  // JSON.stringify({json: value}) is `{"json":` + the JSON text + `}`.
  return result.json !== undefined
    ? result.json.length + 9
    : JSON.stringify({ text: result.text }).length;
}

// ---- errors (spec 3.3) -------------------------------------------------------------------

// User code runs through indirect eval, so its frames read `fn@build/guest.js line N > eval:L:C`.
// Keep only those (as `fn@<sandbox>:L:C`) and the frames of imported modules (named by their
// path, as `fn@/workspace/m.mjs:L`: their columns are those of the converted text), and drop
// driver frames and the wrapper's call site.
const EVAL_FRAME = /^(.*?)@.* > eval:(\d+):(\d+)$/;
const MODULE_FRAME = /^(.*?)@(\/workspace\/.*):(\d+):\d+$/;
let userLines = 1;
let shifts = [];
const DRIVER_FILE = new Error().fileName;

/** A failure whose {name, message, traceback} the driver built itself. */
class GuestFailure {
  constructor(error) {
    this.error = error;
  }
}

/** Map a position in the evaluated source back to the user's code (undo the rewrite). */
function position(line, column) {
  const onLine = shifts.filter((shift) => shift.line === line);
  onLine.sort((a, b) => a.column - b.column);
  let total = 0;
  for (const shift of onLine) {
    const start = shift.column + total; // where the inserted text begins, evaluated coords
    if (column >= start + shift.delta) total += shift.delta;
    else {
      if (column >= start) total = column - shift.column; // inside inserted text
      break;
    }
  }
  return `${line}:${Math.max(1, column - total)}`;
}

function userTraceback(stack) {
  const lines = [];
  for (const line of stack.split('\n')) {
    const frame = EVAL_FRAME.exec(line);
    if (frame && Number(frame[2]) <= userLines) {
      lines.push(`${frame[1]}@<sandbox>:${position(Number(frame[2]), Number(frame[3]))}`);
    }
    const module = MODULE_FRAME.exec(line);
    if (module) lines.push(`${module[1]}@${module[2]}:${module[3]}`);
  }
  return lines;
}

function toError(thrown) {
  if (thrown instanceof GuestFailure) return thrown.error;
  if (thrown !== null && typeof thrown === 'object' && thrown instanceof Error) {
    const stack = String(thrown.stack ?? '').slice(0, TRACEBACK_CHARS);
    const traceback = userTraceback(stack);
    // A syntax error in the evaluated source has no user frame; its fileName is the
    // driver's own file and its line is relative to the source: point there instead.
    if (
      !traceback.length &&
      thrown instanceof SyntaxError &&
      thrown.fileName === DRIVER_FILE &&
      !loadErrors.has(thrown)
    ) {
      traceback.push(`@<sandbox>:${position(thrown.lineNumber, thrown.columnNumber)}`);
    }
    return {
      name: String(thrown.name ?? 'Error'),
      message: String(thrown.message ?? ''),
      traceback,
    };
  }
  // Spec 3.3: `error.name` and `error.message` of any thrown object that has a message
  // (`throw {name: 'X', message: 'm'}`), `String(thrown)` otherwise.
  if (thrown !== null && typeof thrown === 'object') {
    try {
      if (thrown.message !== undefined) {
        return {
          name: String(thrown.name ?? 'Error'),
          message: String(thrown.message),
          traceback: [],
        };
      }
    } catch {
      // a getter that throws, or a name or message that cannot be a string: as below
    }
  }
  let message;
  try {
    message = String(thrown);
  } catch {
    message = Object.prototype.toString.call(thrown);
  }
  // SpiderMonkey reports heap exhaustion by throwing the string "out of memory".
  if (thrown === 'out of memory') return { name: 'InternalError', message, traceback: [] };
  return { name: 'Error', message, traceback: [] };
}

// ---- evaluation --------------------------------------------------------------------------

const PENDING = Symbol('pending');

/** Await `promise` until the microtask queue drains; PENDING if it is still unsettled. */
function settle(promise) {
  return new Promise((resolve, reject) => {
    let done = false;
    Promise.resolve(promise).then(
      (value) => {
        done = true;
        resolve(value);
      },
      (error) => {
        done = true;
        reject(error);
      },
    );
    // A task runs only after every queued microtask, so this fires once the user's promise
    // chains have run out of work.
    scheduleTask(() => {
      if (!done) resolve(PENDING);
    }, 0);
  });
}

function isThenable(value) {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof value.then === 'function'
  );
}

function makeEnv(env) {
  const copy = {};
  for (const key of Object.keys(env)) copy[key] = env[key];
  return Object.freeze(copy);
}

const sessionProcess = {
  cwd: () => getCwd(),
  chdir: (path) => {
    chdir(path);
  },
};

let sessionStarted = false;

Object.defineProperty(globalThis, IMPORT_FUNCTION, { value: importFromWorkspace });

// ---- a context's global declarations (spec 7.8) ------------------------------------------

// The reference evaluates each run as a classic script, whose top-level let/const/class are
// global lexical bindings: they persist, a const cannot be assigned, and no later script
// may declare one of their names again, nor a let/const/class over an earlier var or
// function (SyntaxError before any of it runs). Runs here are indirect evals, so the
// rewrite makes them vars and these records keep the rest of those rules. The vars stay
// enumerable global properties, which the context inspector lists.
const lexicalKinds = new Map(); // name -> 'let' | 'const'
const varNames = new Set();
let uninitialised = new Set(); // this run's lexical names whose statement has not run yet

/** Called by the rewritten code once a let/const/class statement has run. */
function declareLexical(names, constant) {
  for (const name of names) {
    uninitialised.delete(name);
    if (constant) {
      const value = globalThis[name];
      Object.defineProperty(globalThis, name, {
        get: () => value,
        set: () => {
          throw new TypeError(`invalid assignment to const '${name}'`);
        },
        enumerable: true,
        configurable: false,
      });
    } else {
      Object.defineProperty(globalThis, name, { configurable: false });
    }
  }
}

Object.defineProperty(globalThis, DECLARE_FUNCTION, { value: declareLexical });

/** Refuse a script that declares a name again as a classic script's would be, else record
 * its declarations (before it runs, as the reference's global declaration instantiation). */
function instantiateDeclarations({ lexical, vars }) {
  const conflict = (declaration, kind) =>
    new GuestFailure({
      name: 'SyntaxError',
      message: `redeclaration of ${kind} ${declaration.name}`,
      traceback: [`@<sandbox>:${declaration.line}:${declaration.column}`],
    });
  for (const declaration of lexical) {
    const { name } = declaration;
    if (lexicalKinds.has(name)) throw conflict(declaration, lexicalKinds.get(name));
    if (varNames.has(name)) throw conflict(declaration, 'var');
    const property = Object.getOwnPropertyDescriptor(globalThis, name);
    if (property && !property.configurable) {
      throw conflict(declaration, 'non-configurable global property');
    }
  }
  for (const declaration of vars) {
    if (lexicalKinds.has(declaration.name)) {
      throw conflict(declaration, lexicalKinds.get(declaration.name));
    }
  }
  for (const { name, kind } of lexical) lexicalKinds.set(name, kind);
  for (const { name } of vars) varNames.add(name);
  uninitialised = new Set(lexical.map(({ name }) => name));
}

/** A lexical name whose statement never ran (the script threw first) stays out of reach
 * for good, as a script's binding in its temporal dead zone does. */
function sealUninitialised() {
  for (const name of uninitialised) {
    const unreachable = () => {
      throw new ReferenceError(`can't access lexical declaration '${name}' before initialization`);
    };
    Object.defineProperty(globalThis, name, {
      get: unreachable,
      set: unreachable,
      enumerable: false,
      configurable: false,
    });
  }
  uninitialised = new Set();
}

async function evaluateStateless(request) {
  globalThis.process = Object.freeze({ env: makeEnv(request.env) });
  if (globalThis.fs === fs) delete globalThis.fs;
  const rewritten = rewriteStateless(request.code);
  const { source, illegalReturn } = rewritten;
  if (illegalReturn) {
    const where = `@<sandbox>:${illegalReturn.line}:${illegalReturn.column + 1}`;
    throw new GuestFailure({
      name: 'SyntaxError',
      message: 'Illegal return statement',
      traceback: [where],
    });
  }
  shifts = rewritten.shifts;
  return { value: await settle(globalEval(source)), hasResult: true };
}

async function evaluateSession(request) {
  if (!sessionStarted) {
    globalThis.fs = fs;
    globalThis.process = sessionProcess;
    mountWorkspace();
    sessionStarted = true;
  }
  Object.defineProperty(sessionProcess, 'env', {
    value: makeEnv(request.env),
    writable: false,
    enumerable: true,
    configurable: true,
  });
  resetCwd(request.cwd);
  const rewritten = rewriteSession(request.code);
  const { source, async, hasResult } = rewritten;
  shifts = rewritten.shifts;
  instantiateDeclarations(rewritten.declarations);
  let value;
  try {
    value = globalEval(source);
  } finally {
    sealUninitialised();
  }
  if (!hasResult && !async) return { value: undefined, hasResult: false };
  if (async || isThenable(value)) value = await settle(value);
  return { value, hasResult };
}

function limitOr(value, fallback) {
  return value > 0 ? value : fallback;
}

export async function run(requestBytes) {
  try {
    return await execute(requestBytes);
  } catch (failure) {
    // A driver bug must not abort the instance: report it as a guest error instead.
    let message;
    try {
      message = String(failure && failure.stack ? `${failure}\n${failure.stack}` : failure);
    } catch {
      message = 'unknown failure';
    }
    return encodeResponse({
      error: { name: 'EngineError', message: `JavaScript driver failure: ${message}`, traceback: [] },
      console: [],
      cwd: '',
    });
  }
}

async function execute(requestBytes) {
  const request = decodeRequest(requestBytes);
  userLines = request.code.split('\n').length;
  shifts = [];
  logs = [];
  logUnits = 0;
  consoleExceeded = null;
  unitLimit = limitOr(request.consoleLimitUnits, DEFAULT_CONSOLE_UNITS);
  entryLimit = limitOr(request.consoleLimitEntries, DEFAULT_CONSOLE_ENTRIES);
  const resultLimit = limitOr(request.resultLimit, DEFAULT_RESULT_LIMIT);
  const response = { console: logs, cwd: '' };
  try {
    const { value, hasResult } = request.session
      ? await evaluateSession(request)
      : await evaluateStateless(request);
    if (consoleExceeded) throw consoleExceeded;
    if (value === PENDING) {
      response.error = { name: 'Error', message: NEVER_SETTLED, traceback: [] };
    } else if (hasResult) {
      const result = toResult(value);
      if (result && resultUnits(result) > resultLimit) {
        throw new ExecutionLimitError('Result limit exceeded');
      }
      if (result) response.result = result;
    }
  } catch (thrown) {
    // A console limit hit (even if user code caught it) wins over later errors.
    response.error = toError(consoleExceeded || thrown);
  }
  if (request.session) response.cwd = reportedCwd();
  response.console = logs;
  return encodeResponse(response);
}
