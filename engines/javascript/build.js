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
const scoreOnce = {
  name: 'score-once',
  setup(esbuild) {
    esbuild.onLoad({ filter: /intl-datetimeformat[\\/]polyfill-force\.js$/ }, async ({ path }) => {
      const source = await readFile(path, 'utf8');
      if (!source.includes(SCORING_LOOP)) throw new Error(`${path}: BestFitFormatMatcher changed`);
      return { contents: source.replace(SCORING_LOOP, SCORING_ONCE), loader: 'js' };
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
  plugins: [scoreOnce],
});

const { component } = await componentize({
  sourcePath: bundle,
  witPath: join(here, 'wit'),
  worldName: 'guest',
  // No wasi:http in the component: `fetch` and the fetch-event handler are compiled out.
  disableFeatures: ['http', 'fetch-event'],
});
await writeFile(output, component);
