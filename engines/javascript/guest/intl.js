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

// A locale's first date format parses its patterns (about 1G fuel and 0.4 s): done here, the
// pre-initialised image holds them. (Warming `toLocaleString`'s fields too would save its
// first call 200M fuel and cost every run 4 MB of its 64 MiB.)
for (const locale of ['en', 'ja', 'de']) new Intl.DateTimeFormat(locale).format(0);
