// Build the two outputs behind the exports map: dist/esm (ESM) and dist/cjs (CommonJS),
// each with its .d.ts files. dist/cjs/package.json marks its .js files as CommonJS.
// The script backend's two files (SPEC E2) are copied from clients/lua, their one source,
// into dist/lua, and each output's luaDir.js is written to find them there.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
rmSync(join(root, 'dist'), { recursive: true, force: true });
for (const config of ['tsconfig.json', 'tsconfig.cjs.json']) {
  execFileSync(process.execPath, [tsc, '-p', join(root, config)], { stdio: 'inherit' });
}
mkdirSync(join(root, 'dist', 'cjs'), { recursive: true });
writeFileSync(join(root, 'dist', 'cjs', 'package.json'), '{ "type": "commonjs" }\n');

// SPEC E2: the script library ships in the package, copied from clients/lua (never edited here)
const lua = join(root, '..', 'lua');
mkdirSync(join(root, 'dist', 'lua'), { recursive: true });
for (const file of ['tb.lua', 'functions.lua']) copyFileSync(join(lua, file), join(root, 'dist', 'lua', file));
writeFileSync(
  join(root, 'dist', 'esm', 'luaDir.js'),
  "import { fileURLToPath } from 'node:url';\nexport const luaDir = fileURLToPath(new URL('../lua/', import.meta.url));\n",
);
writeFileSync(
  join(root, 'dist', 'cjs', 'luaDir.js'),
  '"use strict";\nObject.defineProperty(exports, "__esModule", { value: true });\nexports.luaDir = require("node:path").join(__dirname, "..", "lua");\n',
);
