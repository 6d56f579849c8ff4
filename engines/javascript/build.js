// Builds the guest component inside a prepared work dir (after `npm ci`):
// wit deps from jco's bundled WASI WIT, esbuild bundle, then componentize-js.
// Usage: node build.js <output.wasm>  (package.json has "type": "module")
import { build } from 'esbuild';
import { componentize } from '@bytecodealliance/componentize-js';
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
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
});

const { component } = await componentize({
  sourcePath: bundle,
  witPath: join(here, 'wit'),
  worldName: 'guest',
  // No wasi:http in the component: `fetch` and the fetch-event handler are compiled out.
  disableFeatures: ['http', 'fetch-event'],
});
await writeFile(output, component);
