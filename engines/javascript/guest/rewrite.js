// Source rewrites before evaluation (spec 7.8 sessions, 9.4 stateless), done with acorn
// inside the guest. TypeScript is only tried when the code is not valid JavaScript, so
// valid JS is never reinterpreted (`a < b > (c)` stays a comparison).
import { parse } from 'acorn';
import { transform } from 'sucrase';
import { IMPORT_FUNCTION } from './modules.js';

const PARSE_OPTIONS = {
  ecmaVersion: 'latest',
  sourceType: 'script',
  allowAwaitOutsideFunction: true,
  allowHashBang: true,
  locations: true,
};

function tryParse(code, extra) {
  try {
    return parse(code, extra ? { ...PARSE_OPTIONS, ...extra } : PARSE_OPTIONS);
  } catch {
    return null;
  }
}

/** TypeScript stripped to JavaScript (types, interfaces, enums, ...), or null if it fails. */
function stripTypeScript(code) {
  try {
    return transform(code, {
      transforms: ['typescript'],
      disableESTransforms: true,
      keepUnusedImports: true,
    }).code;
  } catch {
    return null;
  }
}

/**
 * Parse `code` as a script; on failure try it as TypeScript. Returns {code, ast} with the
 * (possibly stripped) source, or {code, ast: null, illegalReturn} when nothing parses.
 */
function parseScript(code) {
  const ast = tryParse(code);
  if (ast) return { code: renameImports(code, ast), ast };
  const withReturn = tryParse(code, { allowReturnOutsideFunction: true, locations: true });
  if (withReturn) {
    const statement = withReturn.body.find((node) => node.type === 'ReturnStatement');
    const start = statement ? statement.loc.start : { line: 1, column: 0 };
    return { code, ast: null, illegalReturn: { line: start.line, column: start.column } };
  }
  const stripped = stripTypeScript(code);
  if (stripped !== null) {
    const strippedAst = tryParse(stripped);
    if (strippedAst) return { code: renameImports(stripped, strippedAst), ast: strippedAst };
  }
  return { code, ast: null, illegalReturn: null };
}

/** The ast nodes directly below `node`. */
function childNodes(node) {
  const children = [];
  for (const value of Object.values(node)) {
    for (const item of Array.isArray(value) ? value : [value]) {
      if (item && typeof item === 'object' && typeof item.type === 'string') children.push(item);
    }
  }
  return children;
}

/**
 * `code` with the `import` of every `import(...)` in `ast` renamed to the workspace importer
 * (see modules.js). The name is as long as the keyword, so the ast's offsets and every
 * column stay right.
 */
function renameImports(code, ast) {
  const starts = [];
  const visit = (node) => {
    if (node.type === 'ImportExpression') starts.push(node.start);
    childNodes(node).forEach(visit);
  };
  visit(ast);
  let out = code;
  for (const start of starts) {
    out = out.slice(0, start) + IMPORT_FUNCTION + out.slice(start + IMPORT_FUNCTION.length);
  }
  return out;
}

const FUNCTION_NODES = new Set([
  'FunctionDeclaration',
  'FunctionExpression',
  'ArrowFunctionExpression',
]);

/** Does `node` contain an `await` (or `for await`) outside any nested function? */
function hasTopLevelAwait(node) {
  if (!node || typeof node.type !== 'string') return false;
  if (node.type === 'AwaitExpression') return true;
  if (node.type === 'ForOfStatement' && node.await) return true;
  if (FUNCTION_NODES.has(node.type)) return false;
  return childNodes(node).some(hasTopLevelAwait);
}

/** The Identifier nodes a declaration's pattern binds. */
function patternIdentifiers(pattern, out) {
  if (!pattern) return;
  switch (pattern.type) {
    case 'Identifier':
      out.push(pattern);
      break;
    case 'ObjectPattern':
      for (const property of pattern.properties) {
        patternIdentifiers(
          property.type === 'RestElement' ? property.argument : property.value,
          out,
        );
      }
      break;
    case 'ArrayPattern':
      for (const element of pattern.elements) patternIdentifiers(element, out);
      break;
    case 'RestElement':
      patternIdentifiers(pattern.argument, out);
      break;
    case 'AssignmentPattern':
      patternIdentifiers(pattern.left, out);
      break;
  }
}

function patternNames(pattern, out) {
  const identifiers = [];
  patternIdentifiers(pattern, identifiers);
  out.push(...identifiers.map((identifier) => identifier.name));
}

/** A name a script declares at its top level, where (1-based column), and its kind. */
function declared(identifier, kind) {
  const start = identifier.loc.start;
  return { name: identifier.name, kind, line: start.line, column: start.column + 1 };
}

/**
 * The script's top-level declarations: `lexical` ({name, kind: 'let' | 'const', line,
 * column}; a class is a `let`) and `vars` (var and function names), as the global
 * declaration instantiation of a classic script checks them against earlier scripts.
 * With top-level await every name is hoisted to a var (spec 7.8).
 */
function topLevelDeclarations(ast, hoistAll) {
  const lexical = [];
  const vars = [];
  for (const node of ast.body) {
    if (node.type === 'VariableDeclaration' && node.kind !== 'var') {
      const identifiers = [];
      for (const declarator of node.declarations) patternIdentifiers(declarator.id, identifiers);
      for (const identifier of identifiers) {
        if (hoistAll) vars.push(declared(identifier, 'var'));
        else lexical.push(declared(identifier, node.kind === 'const' ? 'const' : 'let'));
      }
    } else if (node.type === 'ClassDeclaration') {
      (hoistAll ? vars : lexical).push(declared(node.id, hoistAll ? 'var' : 'let'));
    }
  }
  if (hoistAll) {
    // The body runs in an async function: only its top-level names become globals.
    for (const node of ast.body) {
      if (node.type === 'VariableDeclaration' && node.kind === 'var') {
        const identifiers = [];
        for (const declarator of node.declarations) patternIdentifiers(declarator.id, identifiers);
        for (const identifier of identifiers) vars.push(declared(identifier, 'var'));
      } else if (node.type === 'FunctionDeclaration') {
        vars.push(declared(node.id, 'var'));
      }
    }
  } else {
    collectVarNames(ast, vars, true);
  }
  return { lexical, vars };
}

/** The script's var-scoped names, as a classic script's global declaration instantiation
 * sees them: `var`s at any depth of blocks, loops, `try` and labels (not inside a
 * function), and function declarations at the top level or under labels. */
function collectVarNames(node, vars, topLevel) {
  if (!node || typeof node.type !== 'string') return;
  if (node.type === 'VariableDeclaration' && node.kind === 'var') {
    const identifiers = [];
    for (const declarator of node.declarations) patternIdentifiers(declarator.id, identifiers);
    for (const identifier of identifiers) vars.push(declared(identifier, 'var'));
  } else if (node.type === 'FunctionDeclaration') {
    if (topLevel) vars.push(declared(node.id, 'var'));
    return;
  } else if (
    FUNCTION_NODES.has(node.type) ||
    node.type === 'ClassDeclaration' ||
    node.type === 'ClassExpression'
  ) {
    return;
  }
  const keepsTopLevel = node.type === 'Program' || node.type === 'LabeledStatement';
  for (const child of childNodes(node)) collectVarNames(child, vars, keepsTopLevel);
}

/** Does the script start with a "use strict" directive? */
function isStrict(ast) {
  for (const node of ast.body) {
    if (node.type !== 'ExpressionStatement' || typeof node.directive !== 'string') return false;
    if (node.directive === 'use strict') return true;
  }
  return false;
}

function applyEdits(code, edits) {
  edits.sort((a, b) => b[0] - a[0]);
  let out = code;
  for (const [start, end, text] of edits) out = out.slice(0, start) + text + out.slice(end);
  return out;
}

function lastExpression(ast) {
  const last = ast.body[ast.body.length - 1];
  return last && last.type === 'ExpressionStatement' ? last : null;
}

const RETURN_PREFIX = 'return (';

/** `return (<expr>);` in place of the final expression statement. */
function returnEdit(code, statement) {
  const expression = statement.expression;
  return [
    statement.start,
    statement.end,
    `${RETURN_PREFIX}${code.slice(expression.start, expression.end)});`,
  ];
}

/** Column shift that `returnEdit` causes: {line, column (1-based), delta}. */
function returnShift(statement) {
  const start = statement.loc.start;
  return { line: start.line, column: start.column + 1, delta: RETURN_PREFIX.length };
}

/**
 * Stateless rewrite (spec 9.4): the whole script becomes the body of an async arrow whose
 * return value is the last top-level expression statement.
 * Returns {source, illegalReturn: {line, column} | null, shifts}; `source` evaluates to a
 * promise and `shifts` lists the column shifts [{line, column, delta}] the rewrite made.
 */
export function rewriteStateless(original) {
  const parsed = parseScript(original);
  if (parsed.illegalReturn) return { source: null, illegalReturn: parsed.illegalReturn };
  let body = parsed.code;
  const prefix = '(async () => {';
  const shifts = [{ line: 1, column: 1, delta: prefix.length }];
  if (parsed.ast) {
    const last = lastExpression(parsed.ast);
    if (last) {
      body = applyEdits(body, [returnEdit(body, last)]);
      shifts.push(returnShift(last));
    }
  }
  return { source: `${prefix}${body}\n})()`, illegalReturn: null, shifts };
}

/** The global the rewrite calls after a top-level let/const/class: see main.js. */
export const DECLARE_FUNCTION = '__workbench_lexical__';

/**
 * Session rewrite (spec 7.8). Without top-level await the script is evaluated with
 * indirect eval, whose own let/const/class would not outlive it, so each becomes a `var`
 * (`const` as `var  `, so no column moves) followed by a call of `DECLARE_FUNCTION`, which
 * makes the names behave as a script's global lexical bindings (a const cannot be
 * assigned); its completion value is the result when the last statement is an expression.
 * With top-level await (Node-REPL style): declared names are hoisted to `var` and the body
 * runs in an async arrow that returns the last expression.
 * Returns {source, async, hasResult, shifts, declarations} (column shifts as in
 * rewriteStateless; `declarations` as `topLevelDeclarations` gives them).
 */
export function rewriteSession(original) {
  const parsed = parseScript(original);
  const code = parsed.code;
  const ast = parsed.ast;
  const none = { lexical: [], vars: [] };
  if (!ast) return { source: code, async: false, hasResult: false, shifts: [], declarations: none };
  const edits = [];
  const shifts = [];
  const insert = (offset, location, text) => {
    edits.push([offset, offset, text]);
    shifts.push({ line: location.line, column: location.column + 1, delta: text.length });
  };
  const last = lastExpression(ast);
  if (isStrict(ast)) {
    // Strict eval code keeps its own declarations, var included: none outlives the run,
    // so none is rewritten or recorded (the names can be declared again).
    return { source: code, async: false, hasResult: last !== null, shifts: [], declarations: none };
  }
  if (!hasTopLevelAwait(ast)) {
    for (const node of ast.body) {
      if (node.type === 'VariableDeclaration' && node.kind !== 'var') {
        const names = [];
        for (const declarator of node.declarations) patternNames(declarator.id, names);
        edits.push([node.start, node.start + node.kind.length, node.kind === 'const' ? 'var  ' : 'var']);
        const constant = node.kind === 'const';
        insert(node.end, node.loc.end, `;${DECLARE_FUNCTION}(${JSON.stringify(names)}, ${constant});`);
      } else if (node.type === 'ClassDeclaration') {
        insert(node.start, node.loc.start, `var ${node.id.name} = `);
        insert(node.end, node.loc.end, `;${DECLARE_FUNCTION}(${JSON.stringify([node.id.name])}, false);`);
      }
    }
    return {
      source: applyEdits(code, edits),
      async: false,
      hasResult: last !== null,
      shifts,
      declarations: topLevelDeclarations(ast, false),
    };
  }
  const hoisted = [];
  const functions = [];
  for (const node of ast.body) {
    if (node.type === 'VariableDeclaration') {
      const names = [];
      for (const declarator of node.declarations) patternNames(declarator.id, names);
      hoisted.push(...names);
      const assignments = node.declarations
        .filter((declarator) => declarator.init || node.kind !== 'var')
        .map((declarator) => {
          const target = code.slice(declarator.id.start, declarator.id.end);
          const value = declarator.init
            ? code.slice(declarator.init.start, declarator.init.end)
            : 'undefined';
          return `${target} = ${value}`;
        });
      edits.push([
        node.start,
        node.end,
        assignments.length ? `void (${assignments.join(', ')});` : ';',
      ]);
    } else if (node.type === 'ClassDeclaration') {
      hoisted.push(node.id.name);
      edits.push([node.start, node.start, `${node.id.name} = `]);
      edits.push([node.end, node.end, ';']);
    } else if (node.type === 'FunctionDeclaration') {
      hoisted.push(node.id.name);
      functions.push(node.id.name);
    }
  }
  if (last) {
    edits.push(returnEdit(code, last));
    shifts.push(returnShift(last));
  }
  const body = applyEdits(code, edits);
  const publish = functions.map((name) => `globalThis[${JSON.stringify(name)}] = ${name};`);
  const declare = hoisted.length ? `var ${[...new Set(hoisted)].join(', ')}; ` : '';
  // Everything before the user's first line stays on line 1 so line numbers still match.
  const prefix = `${declare}(async () => {${publish.join(' ')}`;
  shifts.push({ line: 1, column: 1, delta: prefix.length });
  return {
    source: `${prefix}${body}\n})()`,
    async: true,
    hasResult: last !== null,
    shifts,
    declarations: topLevelDeclarations(ast, true),
  };
}
