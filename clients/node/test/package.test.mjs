// SPEC E2: the npm package ships the script library (dist/lua/tb.lua, functions.lua), copied
// at build time from clients/lua, the one source, and an unpacked package finds it from
// both of its outputs (ESM and CommonJS) outside the repository.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { test } from 'node:test';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.resolve(here, '..');
const lua = path.resolve(pkg, '../lua');

test('npm pack holds dist/lua, byte for byte clients/lua, read by the ESM and CommonJS outputs', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'redis-tb-pack-'));
  try {
    // --ignore-scripts: dist/ is built already (run-tests.sh); a rebuild would pull it from under the other tests
    const out = execFileSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', tmp], { cwd: pkg, encoding: 'utf8' });
    const [{ filename, files }] = JSON.parse(out);
    const names = files.map((f) => f.path);
    for (const f of ['dist/lua/tb.lua', 'dist/lua/functions.lua', 'dist/esm/luaDir.js', 'dist/cjs/luaDir.js']) assert.ok(names.includes(f), `${f} in the tarball`);
    execFileSync('tar', ['-xzf', path.join(tmp, filename), '-C', tmp]);
    const unpacked = path.join(tmp, 'package');
    for (const f of ['tb.lua', 'functions.lua']) {
      assert.ok(fs.readFileSync(path.join(unpacked, 'dist/lua', f)).equals(fs.readFileSync(path.join(lua, f))), `${f} is clients/lua's`);
    }
    const sha = createHash('sha1').update(fs.readFileSync(path.join(lua, 'tb.lua'))).digest('hex');
    const esm = await import(pathToFileURL(path.join(unpacked, 'dist/esm/lua.js')).href);
    const cjs = createRequire(import.meta.url)(path.join(unpacked, 'dist/cjs/lua.js'));
    for (const [what, m] of [['ESM', esm], ['CommonJS', cjs]]) {
      const src = m.luaSources();
      assert.equal(src.sha, sha, what);
      assert.ok(src.functions.startsWith('#!lua name=tb\n'), what);
      assert.ok(src.functions.includes("register('tb_take', 'TAKE')"), what);
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
