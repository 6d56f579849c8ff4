// The context inspector for JavaScript (workbench.api.inspector): lists the global
// bindings the user made (a session's top-level let/const/class persist as global
// properties), or shows one of them in full. An arrow called at once leaves no name.
(() => {
  const targetHex = '{{target_hex}}';
  const SHORT_CHARS = {{short_chars}};
  const OFFSET = {{offset}};
  const PAGE_CHARS = {{page_chars}};
  const MAX_NAMES = {{max_names}};
  const BUDGET = {{budget}}; // UTF-16 units of the names' JSON, to stay under the result limit
  const MARKER = {{marker}}; // '': the host does not watch the listing's progress
  const PASSED_OVER = {{passed_over}}; // indexes of names a run before stopped at
  const PASSED_OVER_REPR = {{passed_over_repr}};
  const FULL_LIMIT = 1 << 22; // a value shown in full stops at 4 Mi chars
  // Enumerable globals that every session has: the runtime's and the driver's.
  const BUILT_IN = new Set([
    'self', 'queueMicrotask', 'structuredClone', 'atob', 'btoa', 'location', 'crypto',
    'fs', 'process', 'navigator', 'performance', 'scheduler',
  ]);

  // What a value is, as text: anything a getter or a Proxy does wrong gives '?'.
  const typeName = (value) => {
    try {
      const name = constructorName(value);
      return typeof name === 'string' ? name.slice(0, SHORT_CHARS) : '?';
    } catch {
      return '?';
    }
  };

  const constructorName = (value) => {
    if (value === null) return 'null';
    if (typeof value === 'function') {
      return /^class[\s{]/.test(Function.prototype.toString.call(value)) ? 'class' : 'function';
    }
    if (typeof value !== 'object') return typeof value;
    if (Array.isArray(value)) return 'Array';
    const proto = Object.getPrototypeOf(value);
    if (proto === null) return 'Object';
    const ctor = proto.constructor;
    return typeof ctor === 'function' && ctor.name ? ctor.name : 'Object';
  };

  const key = (name) => (/^[A-Za-z_$][\w$]*$/.test(name) ? name : JSON.stringify(name));

  // A bounded rendering: `budget` caps what it builds, so a huge value costs little.
  const render = (value, depth, budget, indent) => {
    const seen = new Set();
    const pad = (level) => (indent ? '\n' + '  '.repeat(level) : '');
    const walk = (item, level) => {
      if (budget.left <= 0) return '\u2026';
      let text;
      switch (typeof item) {
        case 'string':
          text = JSON.stringify(item.length > budget.left ? item.slice(0, budget.left) : item);
          break;
        case 'bigint':
          text = `${item}n`;
          break;
        case 'symbol':
          text = item.toString();
          break;
        case 'function': {
          const kind = typeName(item);
          text = kind === 'class' ? `[class ${item.name || '(anonymous)'}]`
            : `[Function: ${item.name || '(anonymous)'}]`;
          break;
        }
        case 'object':
          text = item === null ? 'null' : container(item, level);
          break;
        default:
          text = String(item);
      }
      budget.left -= text.length;
      return text;
    };
    const container = (item, level) => {
      if (seen.has(item)) return '[Circular]';
      if (item instanceof Date) return Number.isNaN(item.getTime()) ? 'Invalid Date' : item.toISOString();
      if (item instanceof RegExp) return String(item);
      if (item instanceof Error) return `${item.name}: ${item.message}`;
      if (level >= depth) return Array.isArray(item) ? '[Array]' : `[${typeName(item)}]`;
      seen.add(item);
      const parts = [];
      const add = (part) => {
        parts.push(part);
        return budget.left > 0;
      };
      let open = '{';
      let close = '}';
      if (Array.isArray(item)) {
        open = '[';
        close = ']';
        for (let index = 0; index < item.length; index++) {
          if (!add(walk(item[index], level + 1))) {
            if (index + 1 < item.length) parts.push(`\u2026 ${item.length - index - 1} more`);
            break;
          }
        }
      } else if (item instanceof Map) {
        open = `Map(${item.size}) {`;
        for (const [entryKey, entryValue] of item) {
          if (!add(`${walk(entryKey, level + 1)} => ${walk(entryValue, level + 1)}`)) break;
        }
      } else if (item instanceof Set) {
        open = `Set(${item.size}) {`;
        for (const member of item) if (!add(walk(member, level + 1))) break;
      } else if (ArrayBuffer.isView(item)) {
        open = `${typeName(item)}(${item.length}) [`;
        close = ']';
        for (const member of Array.from(item.slice(0, 64))) if (!add(walk(member, level + 1))) break;
      } else {
        const kind = typeName(item);
        if (kind !== 'Object') open = `${kind} {`;
        for (const name of Object.keys(item)) {
          if (!add(`${key(name)}: ${walk(item[name], level + 1)}`)) break;
        }
      }
      seen.delete(item);
      if (parts.length === 0) return `${open}${close}`;
      const flat = `${open}${open.endsWith('{') ? ' ' : ''}${parts.join(', ')}${close === '}' ? ' ' : ''}${close}`;
      if (!indent || (flat.length <= 72 && !flat.includes('\n'))) return flat;
      return `${open}${pad(level + 1)}${parts.join(',' + pad(level + 1))}${pad(level)}${close}`;
    };
    return walk(value, 0);
  };

  const safely = (thunk) => {
    try {
      return thunk();
    } catch (error) {
      let kind = typeof error;
      try {
        if (error && typeof error.name === 'string') kind = error.name;
      } catch {
        // a throwing `name` getter: the typeof above stays
      }
      return `<repr failed: ${kind}>`;
    }
  };

  const oneLine = (text) => {
    const flat = text.replace(/\s+/g, ' ');
    return flat.length <= SHORT_CHARS ? flat : flat.slice(0, SHORT_CHARS - 1) + '\u2026';
  };

  // A count, or null: a Proxy or a subclass may answer anything.
  const count = (measure) => {
    try {
      const value = measure();
      return Number.isSafeInteger(value) && value >= 0 ? value : null;
    } catch {
      return null;
    }
  };

  const lengthOf = (value) =>
    count(() => {
      if (typeof value === 'string' || Array.isArray(value) || ArrayBuffer.isView(value)) {
        return value.length;
      }
      if (value instanceof Map || value instanceof Set) return value.size;
      return null;
    });

  const bytesOf = (value) =>
    count(() =>
      value instanceof ArrayBuffer || ArrayBuffer.isView(value) ? value.byteLength : null,
    );

  const valueOf = (name) => {
    try {
      return globalThis[name];
    } catch {
      return '<getter failed>';
    }
  };

  const HELPERS = {{helper_prefixes}}; // the workbench's own names
  const userNames = Object.keys(globalThis).filter(
    (name) => !BUILT_IN.has(name) && !HELPERS.some((prefix) => name.startsWith(prefix)),
  );

  if (targetHex) {
    const name = decodeURIComponent(targetHex.replace(/../g, '%$&'));
    if (!userNames.includes(name)) return { found: false, name };
    const value = valueOf(name);
    // Pages count code points, as the host does (a UTF-16 slice could split a pair).
    const text = Array.from(safely(() => render(value, 8, { left: FULL_LIMIT }, true)));
    return {
      found: true,
      name,
      type: typeName(value),
      repr: text.slice(OFFSET, OFFSET + PAGE_CHARS).join(''),
      total: text.length,
    };
  }
  const order = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  userNames.sort((a, b) => order(a.toLowerCase(), b.toLowerCase()) || order(a, b));
  const names = [];
  let used = 0;
  const listed = userNames.slice(0, MAX_NAMES);
  let marking = MARKER !== '';
  for (let index = 0; index < listed.length; index++) {
    const name = listed[index];
    if (marking) {
      // Which name the listing is at, for the host to watch.
      try {
        console.log(`\n${MARKER} ${index}`);
      } catch {
        marking = false; // user code replaced or broke it: no more markers
      }
    }
    // A name passed over: its getter or Proxy is what did not finish, so nothing reads it.
    const passedOver = PASSED_OVER.includes(index);
    const value = passedOver ? undefined : valueOf(name);
    const entry = {
      name: name.slice(0, SHORT_CHARS * 2),
      type: passedOver ? '?' : typeName(value),
      repr: passedOver
        ? PASSED_OVER_REPR
        : oneLine(safely(() => render(value, 2, { left: SHORT_CHARS * 2 }, false))),
      length: passedOver ? null : lengthOf(value),
      bytes: passedOver ? null : bytesOf(value),
    };
    used += JSON.stringify(entry).length;
    if (used > BUDGET) break;
    names.push(entry);
  }
  return { names, more: userNames.length - names.length };
})()
