// npm's `prepare` for @memory-ext/client: compiles src/ into dist/ with the package's own
// TypeScript, so that one `npm install path/to/memory_ext/clients/typescript` works from a fresh
// checkout. npm runs `prepare` in this folder both when it links the folder (its default for a
// directory) and when it packs a copy (--install-links), but installs none of the folder's own
// dependencies first: when TypeScript is missing here, this installs the folder's locked
// dependencies (package-lock.json, dev ones included: `npm ci --ignore-scripts`), which a linked
// folder also needs at run time (node resolves its imports from here, not from the app).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tsc = join(here, "node_modules", "typescript", "bin", "tsc");

function run(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: here, stdio: "inherit" });
  if (r.error) throw r.error;
  if (r.status !== 0) process.exit(r.status ?? 1);
}

if (!existsSync(tsc)) {
  // The npm that runs this script (npm_execpath), else the one on PATH. --include=dev: an
  // `npm install --omit=dev` of the app passes its omit down in the environment.
  const npm = process.env.npm_execpath;
  const args = ["ci", "--ignore-scripts", "--include=dev", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", here];
  if (npm && npm.endsWith(".js")) run(process.execPath, [npm, ...args]);
  else run(process.platform === "win32" ? "npm.cmd" : "npm", args);
}
run(process.execPath, [tsc, "-p", join(here, "tsconfig.json")]);
