// Builds the guest component inside a prepared work dir (after `npm ci`):
// wit deps from jco's bundled WASI WIT, esbuild bundle, then componentize-js.
// Usage: node build.js <output.wasm>  (package.json has "type": "module")
import { build } from 'esbuild';
import { componentize } from '@bytecodealliance/componentize-js';
import { copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const output = process.argv[2];
const WASI = '0.2.12';

for (const name of ['filesystem', 'io', 'clocks']) {
  const source = join(here, 'node_modules/@bytecodealliance/jco/lib/wit/builtin', WASI, `wasi-${name}`, 'package.wit');
  await mkdir(join(here, 'wit/deps', name), { recursive: true });
  await copyFile(source, join(here, 'wit/deps', name, 'package.wit'));
}

// formatjs scores every skeleton of a locale for each new DateTimeFormat, most of what one
// costs in an interpreter (200M fuel). The choice depends only on the requested fields, so it
// is kept per skeleton list and fields. The build fails if the pinned source changes.
const SCORING_LOOP = `function BestFitFormatMatcher(options, formats) {
\tlet bestScore = -Infinity;
\tlet bestFormat = formats[0];
\tinvariant(Array.isArray(formats), "formats should be a list of things");
\tfor (const format of formats) {
\t\tconst score = bestFitFormatMatcherScore(options, format);
\t\tif (score > bestScore) {
\t\t\tbestScore = score;
\t\t\tbestFormat = format;
\t\t}
\t}
`;
const SCORING_ONCE = `const bestFitChoices = new WeakMap();
function bestFitFormat(options, formats) {
\tlet choices = bestFitChoices.get(formats);
\tif (choices === undefined) bestFitChoices.set(formats, (choices = new Map()));
\tconst key = [options.hour12, ...DATE_TIME_PROPS.map((prop) => options[prop])].join("|");
\tlet best = choices.get(key);
\tif (best === undefined) {
\t\tlet bestScore = -Infinity;
\t\tbest = formats[0];
\t\tfor (const format of formats) {
\t\t\tconst score = bestFitFormatMatcherScore(options, format);
\t\t\tif (score > bestScore) {
\t\t\t\tbestScore = score;
\t\t\t\tbest = format;
\t\t\t}
\t\t}
\t\tchoices.set(key, best);
\t}
\treturn best;
}
function BestFitFormatMatcher(options, formats) {
\tinvariant(Array.isArray(formats), "formats should be a list of things");
\tconst bestFormat = bestFitFormat(options, formats);
`;
// Each numeric field of a date goes through a NumberFormat (about 25k fuel here, as formatjs
// works in decimal arithmetic). For Latin digits without grouping, a whole number from 0 up
// is its digits, padded: those skip it, with the same output.
const NUMBER_FORMATTERS = `\treturn {
\t\tnf,
\t\tnf2,
\t\tnf3
\t};
}
`;
const PLAIN_DIGITS = `\tif (internalSlots.numberingSystem !== "latn") return { nf, nf2, nf3 };
\treturn {
\t\tnf: plainDigits(nf, 1),
\t\tnf2: plainDigits(nf2, 2),
\t\tnf3: nf3 && plainDigits(nf3, fractionalSecondDigits)
\t};
}
function plainDigits(formatter, width) {
\treturn { format: (v) => Number.isSafeInteger(v) && v >= 0 ? String(v).padStart(width, "0") : formatter.format(v) };
}
`;
const PATCHES = [
  ['BestFitFormatMatcher', SCORING_LOOP, SCORING_ONCE],
  ['createNumberFormatters', NUMBER_FORMATTERS, PLAIN_DIGITS],
];
const formatjsPatches = {
  name: 'formatjs-patches',
  setup(esbuild) {
    esbuild.onLoad({ filter: /intl-datetimeformat[\\/]polyfill-force\.js$/ }, async ({ path }) => {
      let source = await readFile(path, 'utf8');
      for (const [name, before, after] of PATCHES) {
        if (source.split(before).length !== 2) throw new Error(`${path}: ${name} changed`);
        source = source.replace(before, after);
      }
      return { contents: source, loader: 'js' };
    });
  },
};

const bundle = join(here, 'build/guest.js');
await build({
  entryPoints: [join(here, 'guest/main.js')],
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  mainFields: ['module', 'main'],
  external: ['wasi:*'],
  outfile: bundle,
  logLevel: 'warning',
  // The guest keeps its source text: minified, the image is 2 MB smaller.
  minify: true,
  plugins: [formatjsPatches],
});

const { component } = await componentize({
  sourcePath: bundle,
  witPath: join(here, 'wit'),
  worldName: 'guest',
  // No wasi:http in the component: `fetch` and the fetch-event handler are compiled out.
  disableFeatures: ['http', 'fetch-event'],
});
await writeFile(output, component);
