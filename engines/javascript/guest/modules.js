// Dynamic `import()` of `.js`, `.mjs` and `.json` files from /workspace (spec 7.8). The
// engine's own module loader reads from the component's build directory, so the rewrite
// turns each `import(...)` of the user's code into a call of `IMPORT_FUNCTION` (as long as
// the keyword, so that no column moves). It reads the file through `fs`, turns its
// `import`/`export` statements into `require` calls and `exports` (sucrase; lines are
// kept) and runs it once: a module is cached by its absolute path for the life of the
// realm (a context's snapshot keeps it), as an ES module would be. A module's relative
// specifiers resolve against its own directory, the user's against the context's cwd.
import { parse } from 'acorn';
import { transform } from 'sucrase';
import { fs, getCwd, insideWorkspace, normalize } from './fs.js';

// `ımport` (a dotless i) is as long as the keyword and no one's binding.
export const IMPORT_FUNCTION = '\u0131mport';
const LOADABLE = /\.(?:m?js|json)$/;
const HASHBANG = /^#![^\n\r\u2028\u2029]*/;
const globalEval = globalThis.eval;
const modules = new Map();
let workspaceMounted = false;

/** Errors about a module itself (its text, its path): not positions in the user's code. */
export const loadErrors = new WeakSet();

/** Imports read /workspace only in a context (a stateless run has none). */
export function mountWorkspace() {
  workspaceMounted = true;
}

function loadError(specifier, absolute, reason) {
  const resolved = absolute === null ? '' : ` (resolved path "${absolute}")`;
  const error = new TypeError(`Error loading module "${specifier}"${resolved}: ${reason}`);
  loadErrors.add(error);
  return error;
}

/** A SyntaxError about the module's text, at its line (a parser's own "(L:C)" dropped). */
function syntaxError(absolute, line, message) {
  const text = String(message).replace(/ \(\d+:\d+\)$/, '');
  const error = new SyntaxError(`${text} (${absolute}${line ? `:${line}` : ''})`);
  loadErrors.add(error);
  return error;
}

function directoryOf(path) {
  return path.slice(0, path.lastIndexOf('/')) || '/';
}

/**
 * The module's text parsed (a SyntaxError names the file and line), with each
 * `export let a = 1, b` split into one declaration per name: sucrase 3.35 turns the list
 * into `let a = 1; exports.a = a, b` (assigning an undeclared `b`). Lines are kept.
 */
function prepare(absolute, source) {
  const comments = [];
  let ast;
  try {
    ast = parse(source, {
      ecmaVersion: 'latest',
      sourceType: 'module',
      allowHashBang: true,
      locations: true,
      onComment: (_block, _text, start, end) => comments.push([start, end]),
    });
  } catch (error) {
    throw syntaxError(absolute, error.loc?.line, error.message);
  }
  const commas = [];
  for (const node of ast.body) {
    const declaration = node.type === 'ExportNamedDeclaration' ? node.declaration : null;
    if (declaration?.type !== 'VariableDeclaration') continue;
    const list = declaration.declarations;
    for (let index = 1; index < list.length; index++) {
      let at = list[index - 1].end;
      while (source[at] !== ',' || comments.some(([start, end]) => start <= at && at < end)) at++;
      commas.push([at, `; export ${declaration.kind} `]);
    }
  }
  let text = source;
  for (const [at, replacement] of commas.reverse()) {
    text = text.slice(0, at) + replacement + text.slice(at + 1);
  }
  // A hashbang is a comment in a module; kept as one.
  return text.replace(HASHBANG, (line) => `//${line.slice(2)}`);
}

/** The module's body as a function of its `exports` and `require` (lines kept). */
function compile(absolute, source) {
  let code;
  try {
    code = transform(prepare(absolute, source), { transforms: ['imports'], filePath: absolute }).code;
  } catch (error) {
    if (loadErrors.has(error)) throw error;
    throw syntaxError(absolute, error.loc?.line, error.message);
  }
  // Named in stack traces by its path (only characters that cannot end the comment).
  const name = absolute.replace(/[^\w./@+-]/g, '_');
  try {
    return globalEval(`(function (exports, require) {${code}\n})\n//# sourceURL=${name}`);
  } catch (error) {
    if (!(error instanceof SyntaxError)) throw error;
    throw syntaxError(absolute, error.lineNumber, error.message);
  }
}

/**
 * The module's record, loaded and run on first use: `{ exports, namespace, error }`. A
 * module that threw stays failed: importing it again throws the same error.
 */
function load(specifier, base) {
  if (!workspaceMounted) throw loadError(specifier, null, 'a stateless run has no /workspace');
  if (!specifier.startsWith('/') && !specifier.startsWith('./') && !specifier.startsWith('../')) {
    throw loadError(specifier, null, 'only paths in /workspace can be imported');
  }
  const absolute = normalize(specifier, base);
  const known = modules.get(absolute);
  if (known) {
    if (known.failed) throw known.error;
    return known;
  }
  if (!insideWorkspace(absolute)) {
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
  const record = { exports: {}, namespace: null, failed: false, error: undefined };
  if (absolute.endsWith('.json')) {
    let value;
    try {
      value = JSON.parse(source);
    } catch (error) {
      throw syntaxError(absolute, 0, error.message);
    }
    record.exports = { __esModule: true, default: value };
    modules.set(absolute, record);
    return record;
  }
  const body = compile(absolute, source);
  modules.set(absolute, record); // before it runs: an import cycle sees the exports so far
  const directory = directoryOf(absolute);
  try {
    body.call(undefined, record.exports, (inner) => load(String(inner), directory).exports);
  } catch (error) {
    record.failed = true;
    record.error = error;
    throw error;
  }
  return record;
}

/** What `import()` resolves to: the module's exports as a namespace object, one per module. */
function namespaceOf(record) {
  if (record.namespace) return record.namespace;
  const namespace = Object.create(null);
  const { exports } = record;
  for (const key of Object.keys(exports).sort()) {
    if (key === '__esModule') continue;
    Object.defineProperty(namespace, key, { enumerable: true, get: () => exports[key] });
  }
  Object.defineProperty(namespace, Symbol.toStringTag, { value: 'Module' });
  record.namespace = Object.freeze(namespace);
  return record.namespace;
}

export async function importFromWorkspace(specifier) {
  return namespaceOf(load(String(specifier), getCwd()));
}

/** Forget the modules under `root`, so that the next imports read them again (watch-and-run). */
function forget(root) {
  const prefix = `${normalize(String(root))}/`;
  for (const path of [...modules.keys()]) {
    if (path.startsWith(prefix)) modules.delete(path);
  }
}
Object.defineProperty(importFromWorkspace, 'forget', { value: forget });
