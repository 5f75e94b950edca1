// bench.mjs --baseline REV: clients/node as it was at a git revision, extracted with
// `git archive` into a scratch directory outside the repository (os.tmpdir()), installed
// with `npm ci` (the npm configuration of the machine; that revision's own .npmrc and
// lockfile) and built with its own `npm run build`. Reused when the same commit was built
// there before. The variants tb@base / tb3@base import it (TB_PACKAGE_DIR, tb-variant.mjs).
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const git = (root, ...argv) => execFileSync('git', ['-C', root, ...argv], { encoding: 'utf8', maxBuffer: 1 << 28 }).trim();

/** sha256 of the .js files under `dir` (names and contents, sorted): the built code, to tell two builds apart. */
export function codeHash(dir) {
  const h = crypto.createHash('sha256');
  const walk = (d) => {
    for (const name of fs.readdirSync(d).sort()) {
      const p = path.join(d, name);
      if (fs.statSync(p).isDirectory()) walk(p);
      else if (name.endsWith('.js')) h.update(`${path.relative(dir, p)}\0`).update(fs.readFileSync(p)).update('\0');
    }
  };
  walk(dir);
  return h.digest('hex').slice(0, 16);
}

/** Extracts, installs and builds REV's clients/node; returns where it is and what it is. */
export function prepareBaseline(root, rev) {
  let sha;
  try {
    sha = git(root, 'rev-parse', '--verify', '--quiet', `${rev}^{commit}`);
  } catch {
    throw new Error(`--baseline ${rev}: not a revision of ${root}`);
  }
  try {
    git(root, 'cat-file', '-e', `${sha}:clients/node/package.json`);
  } catch {
    throw new Error(`--baseline ${rev}: ${sha.slice(0, 12)} has no clients/node/package.json`);
  }
  const scratch = path.join(os.tmpdir(), `redis-tb-node-baseline-${sha.slice(0, 12)}`);
  const dir = path.join(scratch, 'clients', 'node');
  const stamp = path.join(scratch, 'built');
  const log = (msg) => process.stderr.write(`baseline ${rev}: ${msg}\n`);
  if (fs.existsSync(stamp) && fs.readFileSync(stamp, 'utf8').trim() === sha) {
    log(`reusing the build in ${dir}`);
  } else {
    fs.rmSync(scratch, { recursive: true, force: true });
    fs.mkdirSync(scratch, { recursive: true });
    log(`git archive ${sha.slice(0, 12)} clients/node into ${scratch}`);
    const tar = execFileSync('git', ['-C', root, 'archive', '--format=tar', sha, 'clients/node'], { maxBuffer: 1 << 30 });
    execFileSync('tar', ['-x', '-C', scratch], { input: tar });
    const npm = (...argv) => execFileSync('npm', argv, { cwd: dir, stdio: ['ignore', 2, 2] });
    log('npm ci');
    npm('ci', '--include=dev', '--no-audit', '--no-fund');
    log('npm run build');
    npm('run', 'build');
    fs.writeFileSync(stamp, `${sha}\n`);
  }
  const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  if (pkg.name !== 'redis-tb') throw new Error(`${dir}: package ${pkg.name}, not redis-tb`);
  return {
    rev,
    sha,
    short: sha.slice(0, 7),
    subject: git(root, 'log', '-1', '--format=%s', sha),
    date: git(root, 'log', '-1', '--format=%cI', sha),
    dir,
    version: pkg.version,
    code: codeHash(path.join(dir, 'dist', 'esm')),
  };
}
