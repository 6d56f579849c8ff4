// Run by wrangler as this Worker's custom build (`wrangler deploy`, `wrangler dev`,
// `wrangler deploy --dry-run`): it refuses to build unless every @sandbox-workers/*
// package pinned in package.json's peerDependencies is installed at exactly that version,
// so what is deployed is the tested set that `sandbox-workbench gateway init` rendered.
// Copied into each Worker by the renderer, from worker_templates/check-versions.mjs.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url)); // the Worker's directory, whatever the cwd
const EXACT_VERSION = /^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$/;

/** The version of `name` that Node.js resolution finds from `start`, or null. */
function installedVersion(name, start) {
  for (let directory = resolve(start); ; directory = dirname(directory)) {
    const manifest = join(directory, "node_modules", name, "package.json");
    if (existsSync(manifest)) return JSON.parse(readFileSync(manifest, "utf8")).version ?? null;
    if (dirname(directory) === directory) return null;
  }
}

const manifest = JSON.parse(readFileSync(join(HERE, "package.json"), "utf8"));
const problems = [];
for (const [name, pinned] of Object.entries(manifest.peerDependencies ?? {})) {
  if (!name.startsWith("@sandbox-workers/")) continue;
  const installed = installedVersion(name, HERE);
  if (!EXACT_VERSION.test(pinned)) {
    problems.push(`package.json must pin ${name} to one exact version, not "${pinned}"`);
  } else if (installed === null) {
    problems.push(`${name} is not installed: npm install --no-save ${name}@${pinned} (or its ${pinned} tarball)`);
  } else if (installed !== pinned) {
    problems.push(`${name} ${installed} is installed, but this Worker is pinned to ${pinned} (the tested set): install ${pinned}`);
  }
}
if (problems.length > 0) {
  for (const problem of problems) console.error(`version check: ${problem}`);
  process.exit(1);
}
console.log("version check: every @sandbox-workers package is at its pinned version");
