// `Intl` for the guest (spec 9.1 lists `intl` among the JavaScript runtime's capabilities):
// StarlingMonkey is built without ICU, so the formatjs implementations stand in, with the
// data of the `en`, `ja` and `de` locales. They run here, at build time, so the
// pre-initialised image holds them and a cold start pays nothing for them. They also
// patch `toLocaleString` and its kin. `Collator` (which formatjs does not provide) is ours:
// Unicode order of the base letters, then accents, then case, not ICU's tables.
// Unicode normalization (`String.prototype.normalize`) needs ICU and stays missing.
import '@formatjs/intl-getcanonicallocales/polyfill-force.js';
import '@formatjs/intl-locale/polyfill-force.js';
import '@formatjs/intl-pluralrules/polyfill-force.js';
import '@formatjs/intl-pluralrules/locale-data/en.js';
import '@formatjs/intl-pluralrules/locale-data/ja.js';
import '@formatjs/intl-pluralrules/locale-data/de.js';
import '@formatjs/intl-numberformat/polyfill-force.js';
import '@formatjs/intl-numberformat/locale-data/en.js';
import '@formatjs/intl-numberformat/locale-data/ja.js';
import '@formatjs/intl-numberformat/locale-data/de.js';
import '@formatjs/intl-datetimeformat/polyfill-force.js';
import './date_time_data.js';
import '@formatjs/intl-datetimeformat/locale-data/en.js';
import '@formatjs/intl-datetimeformat/locale-data/ja.js';
import '@formatjs/intl-datetimeformat/locale-data/de.js';
import '@formatjs/intl-datetimeformat/add-all-tz.js';
import '@formatjs/intl-relativetimeformat/polyfill-force.js';
import '@formatjs/intl-relativetimeformat/locale-data/en.js';
import '@formatjs/intl-relativetimeformat/locale-data/ja.js';
import '@formatjs/intl-relativetimeformat/locale-data/de.js';
import '@formatjs/intl-listformat/polyfill-force.js';
import '@formatjs/intl-listformat/locale-data/en.js';
import '@formatjs/intl-listformat/locale-data/ja.js';
import '@formatjs/intl-listformat/locale-data/de.js';
import '@formatjs/intl-segmenter/polyfill-force.js';

// Workers run in UTC.
Intl.DateTimeFormat.__setDefaultTimeZone?.('UTC');

const SENSITIVITIES = new Set(['base', 'accent', 'case', 'variant']);
// Without ICU there is no `normalize` and no `\p{M}`: marks are stripped, and Latin-1 and
// Latin Extended-A letters folded to their base letters, from these tables.
const MARKS = /[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f\u3099\u309a]/g;
const ACCENTED =
  'ÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖÙÚÛÜÝàáâãäåçèéêëìíîïñòóôõöùúûüýÿĀāĂăĄąĆćĈĉĊċČčĎďĒēĔĕĖėĘęĚěĜĝĞğĠġĢģ' +
  'ĤĥĨĩĪīĬĭĮįİĴĵĶķĹĺĻļĽľŃńŅņŇňŌōŎŏŐőŔŕŖŗŘřŚśŜŝŞşŠšŢţŤťŨũŪūŬŭŮůŰűŲųŴŵŶŷŸŹźŻżŽž';
const PLAIN =
  'AAAAAACEEEEIIIINOOOOOUUUUYaaaaaaceeeeiiiinooooouuuuyyAaAaAaCcCcCcCcDdEeEeEeEeEeGgGgGgGg' +
  'HhIiIiIiIiIJjKkLlLlLlNnNnNnOoOoOoRrRrRrSsSsSsSsTtTtUuUuUuUuUuUuWwYyYZzZzZz';
const BASE_LETTER = new Map(Array.from(ACCENTED, (letter, index) => [letter, PLAIN[index]]));
const PUNCTUATION = /[\s!-/:-@[-`{-~\u00a1-\u00bf\u2000-\u206f\u3000-\u303f]/g;
const DIGITS = /(\d+)/;

function pieces(text, numeric) {
  return numeric ? text.split(DIGITS) : [text];
}

function compareWith(a, b, fold, numeric) {
  const left = pieces(fold(a), numeric);
  const right = pieces(fold(b), numeric);
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    if (left[i] === right[i]) continue;
    if (numeric && i % 2 === 1) {
      const difference = Number(left[i]) - Number(right[i]);
      if (difference !== 0) return Math.sign(difference);
    }
    return left[i] < right[i] ? -1 : 1;
  }
  return Math.sign(left.length - right.length);
}

const base = (text) =>
  Array.from(text.replace(MARKS, ''), (letter) => BASE_LETTER.get(letter) ?? letter)
    .join('')
    .toLowerCase();
const accented = (text) => text.toLowerCase();
// Lower case first, as ICU orders case by default ("a" < "A").
const cased = (text) => {
  let out = '';
  for (const character of text) {
    const lower = character.toLowerCase();
    out += character === lower ? `0${character}` : `1${lower}`;
  }
  return out;
};

class Collator {
  #locale;
  #sensitivity;
  #numeric;
  #ignorePunctuation;

  constructor(locales, options = {}) {
    const requested = locales === undefined ? [] : Intl.getCanonicalLocales(locales);
    this.#locale = requested[0] ?? 'en';
    const sensitivity = options.sensitivity ?? 'variant';
    if (!SENSITIVITIES.has(sensitivity)) {
      throw new RangeError(`Value ${sensitivity} out of range for Intl.Collator options property sensitivity`);
    }
    this.#sensitivity = sensitivity;
    this.#numeric = Boolean(options.numeric);
    this.#ignorePunctuation = Boolean(options.ignorePunctuation);
  }

  get compare() {
    return (x, y) => {
      let a = String(x);
      let b = String(y);
      if (this.#ignorePunctuation) {
        a = a.replace(PUNCTUATION, '');
        b = b.replace(PUNCTUATION, '');
      }
      const numeric = this.#numeric;
      const order = compareWith(a, b, base, numeric);
      if (order !== 0 || this.#sensitivity === 'base') return order;
      if (this.#sensitivity !== 'case') {
        const accents = compareWith(a, b, accented, numeric);
        if (accents !== 0 || this.#sensitivity === 'accent') return accents;
      }
      return compareWith(a, b, cased, numeric);
    };
  }

  resolvedOptions() {
    return {
      locale: this.#locale,
      usage: 'sort',
      sensitivity: this.#sensitivity,
      ignorePunctuation: this.#ignorePunctuation,
      collation: 'default',
      numeric: this.#numeric,
      caseFirst: 'false',
    };
  }

  static supportedLocalesOf(locales) {
    return locales === undefined ? [] : Intl.getCanonicalLocales(locales);
  }
}

Object.defineProperty(Intl, 'Collator', { value: Collator, writable: true, configurable: true });
Object.defineProperty(String.prototype, 'localeCompare', {
  value: function localeCompare(that, locales, options) {
    return new Collator(locales, options).compare(this, that);
  },
  writable: true,
  configurable: true,
});

// `toLocaleString` and its kin make a new formatter each call, as ECMA-402 says, and a new
// formatjs formatter costs about 400k fuel (ICU's costs little): 100 calls would not fit in
// a run's 50M. A formatter holds no state, so the last formatters made for the same
// locales and options are kept and used again, when the options are plain values (no
// getters, nothing inherited) and so cannot say anything else the next time.
const FORMATTERS = new Map();
const KEPT_FORMATTERS = 32;

function valueKey(value) {
  const type = typeof value;
  return type === 'string' || type === 'number' || type === 'boolean' || value === undefined
    ? `${type}:${String(value)}`
    : undefined;
}

function formatterKey(locales, options) {
  const parts = [];
  if (Array.isArray(locales) && Object.getPrototypeOf(locales) === Array.prototype) {
    for (const locale of locales) parts.push(valueKey(locale));
  } else {
    parts.push(valueKey(locales));
  }
  parts.push('|');
  if (options !== undefined) {
    if (options === null || Object.getPrototypeOf(options) !== Object.prototype) return undefined;
    for (const inherited in Object.prototype) return undefined;
    const own = Object.getOwnPropertyDescriptors(options);
    if (Object.getOwnPropertySymbols(own).length) return undefined;
    for (const name of Object.keys(own).sort()) {
      if (!('value' in own[name])) return undefined;
      parts.push(`${name}=${valueKey(own[name].value)}`);
    }
  }
  return parts.includes(undefined) ? undefined : parts.join('\n');
}

// ECMA-402's ToDateTimeOptions: the fields a `toLocale*String` shows by default.
function dateTimeOptions(options, required, defaults) {
  const chosen = Object.create(options === undefined ? null : Object(options));
  let needDefaults = chosen.dateStyle === undefined && chosen.timeStyle === undefined;
  if (required !== 'time') {
    for (const field of ['weekday', 'year', 'month', 'day']) {
      if (chosen[field] !== undefined) needDefaults = false;
    }
  }
  if (required !== 'date') {
    for (const field of ['dayPeriod', 'hour', 'minute', 'second', 'fractionalSecondDigits']) {
      if (chosen[field] !== undefined) needDefaults = false;
    }
  }
  if (required === 'date' && chosen.timeStyle) throw new TypeError('timeStyle in a date');
  if (required === 'time' && chosen.dateStyle) throw new TypeError('dateStyle in a time');
  if (needDefaults && defaults !== 'time') {
    for (const field of ['year', 'month', 'day']) chosen[field] = 'numeric';
  }
  if (needDefaults && defaults !== 'date') {
    for (const field of ['hour', 'minute', 'second']) chosen[field] = 'numeric';
  }
  return chosen;
}

function keepFormatters(prototype, name, makeFormatter) {
  const original = prototype[name];
  const kept = {
    [name](locales, options) {
      const key = formatterKey(locales, options);
      if (key === undefined) return original.call(this, locales, options);
      const formatterName = `${name}\n${key}`;
      let formatter = FORMATTERS.get(formatterName);
      try {
        formatter ??= makeFormatter(locales, options);
        const formatted = formatter.format(this);
        FORMATTERS.delete(formatterName);
        FORMATTERS.set(formatterName, formatter);
        if (FORMATTERS.size > KEPT_FORMATTERS) FORMATTERS.delete(FORMATTERS.keys().next().value);
        return formatted;
      } catch {
        return original.call(this, locales, options); // its own answer or error, e.g. Invalid Date
      }
    },
  }[name];
  Object.defineProperty(prototype, name, { value: kept, writable: true, configurable: true });
}

for (const [name, required, defaults] of [
  ['toLocaleString', 'any', 'all'],
  ['toLocaleDateString', 'date', 'date'],
  ['toLocaleTimeString', 'time', 'time'],
]) {
  keepFormatters(Date.prototype, name, (locales, options) => {
    return new Intl.DateTimeFormat(locales, dateTimeOptions(options, required, defaults));
  });
}
for (const prototype of [Number.prototype, BigInt.prototype]) {
  keepFormatters(prototype, 'toLocaleString', (locales, options) => {
    return new Intl.NumberFormat(locales, options);
  });
}

// A locale's first date format parses its patterns (most of a second): done here, the
// pre-initialised image holds them. (Warming `toLocaleString`'s fields too would save its
// first call about 3M fuel and cost every run 4 MB of its 64 MiB.)
for (const locale of ['en', 'ja', 'de']) new Intl.DateTimeFormat(locale).format(0);
