// Dynamic `import()` of `.js`, `.mjs` and `.json` files from /workspace (spec 7.8). The
// engine's own module loader reads from the component's build directory, so the rewrite
// turns each `import(...)` of the user's code into a call of `IMPORT_FUNCTION` (as long as
// the keyword, so that no column moves). It reads the file through `fs`, turns its
// `import`/`export` statements into `require` calls and `exports` (sucrase; lines are
// kept) and runs it once: a module is cached by its absolute path for the life of the
// realm (a context's snapshot keeps it), as an ES module would be. A module's relative
// specifiers resolve against its own directory, the user's against the context's cwd.
import { transform } from 'sucrase';
import { fs, getCwd, normalize, WORKSPACE } from './fs.js';

export const IMPORT_FUNCTION = '$mport';
const LOADABLE = /\.(?:m?js|json)$/;
const globalEval = globalThis.eval;
const modules = new Map();
let workspaceMounted = false;

/** Imports read /workspace only in a context (a stateless run has none). */
export function mountWorkspace() {
  workspaceMounted = true;
}

function loadError(specifier, absolute, reason) {
  const resolved = absolute === null ? '' : ` (resolved path "${absolute}")`;
  return new TypeError(`Error loading module "${specifier}"${resolved}: ${reason}`);
}

function directoryOf(path) {
  return path.slice(0, path.lastIndexOf('/')) || '/';
}

/** The module's record, loaded and run on first use: `{ exports }`. */
function load(specifier, base) {
  if (!workspaceMounted) throw loadError(specifier, null, 'a stateless run has no /workspace');
  if (!specifier.startsWith('/') && !specifier.startsWith('./') && !specifier.startsWith('../')) {
    throw loadError(specifier, null, 'only paths in /workspace can be imported');
  }
  const absolute = normalize(specifier, base);
  const known = modules.get(absolute);
  if (known) return known;
  if (absolute !== WORKSPACE && !absolute.startsWith(`${WORKSPACE}/`)) {
    throw loadError(specifier, absolute, 'only paths in /workspace can be imported');
  }
  if (!LOADABLE.test(absolute)) {
    throw loadError(specifier, absolute, 'only .js, .mjs and .json files can be imported');
  }
  let source;
  try {
    source = fs.readFileSync(absolute, 'utf8');
  } catch (error) {
    throw loadError(specifier, absolute, error.message);
  }
  const record = { exports: {} };
  if (absolute.endsWith('.json')) {
    record.exports = { __esModule: true, default: JSON.parse(source) };
    modules.set(absolute, record);
    return record;
  }
  let code;
  try {
    code = transform(source, { transforms: ['imports'], filePath: absolute }).code;
  } catch (error) {
    throw new SyntaxError(`${absolute}: ${error.message}`);
  }
  // Named in stack traces by its path (only characters that cannot end the comment).
  const name = absolute.replace(/[^\w./@+-]/g, '_');
  const body = globalEval(`(function (exports, require, module) {${code}\n})\n//# sourceURL=${name}`);
  modules.set(absolute, record); // before it runs: an import cycle sees the exports so far
  const directory = directoryOf(absolute);
  try {
    body.call(undefined, record.exports, (inner) => load(String(inner), directory).exports, record);
  } catch (error) {
    modules.delete(absolute);
    throw error;
  }
  return record;
}

/** What `import()` resolves to: the module's exports as a namespace object. */
function namespaceOf(exports) {
  const namespace = Object.create(null);
  for (const key of Object.keys(exports)) {
    if (key === '__esModule') continue;
    Object.defineProperty(namespace, key, { enumerable: true, get: () => exports[key] });
  }
  Object.defineProperty(namespace, Symbol.toStringTag, { value: 'Module' });
  return Object.freeze(namespace);
}

export async function importFromWorkspace(specifier) {
  return namespaceOf(load(String(specifier), getCwd()).exports);
}
