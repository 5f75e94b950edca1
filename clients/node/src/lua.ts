/**
 * The script library (clients/lua, SPEC E2) as the package ships it: `tb.lua` for
 * `SCRIPT LOAD`, its SHA-1 as the client computes it, and the Functions build made from the
 * two files as clients/lua/README.md says (`#!lua name=tb`, tb.lua above its EVAL entry,
 * functions.lua). Read once, on the first use.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { luaDir } from './luaDir.js';

export interface LuaSources {
  /** tb.lua's text (SCRIPT LOAD) */
  readonly script: string;
  /** its SHA-1, 40 lowercase hex digits */
  readonly sha: string;
  /** the Functions library's text (FUNCTION LOAD REPLACE) */
  readonly functions: string;
}

/** The line that starts tb.lua's EVAL entry: the library is everything above it. */
const EVAL_ENTRY = '-- EVAL entry:';

/** The Functions build of `script` (tb.lua's text) with `entry` (functions.lua's). */
export function functionsLibrary(script: string, entry: string): string {
  const end = script.indexOf(EVAL_ENTRY);
  if (end < 0) throw new Error('tb.lua has no EVAL entry line');
  return `#!lua name=tb\n${script.slice(0, end)}${entry}`;
}

export function sha1(text: string): string {
  return createHash('sha1').update(text, 'utf8').digest('hex');
}

let cached: LuaSources | null = null;

/** The library's texts, from `dir` (default: the package's `dist/lua`). */
export function luaSources(dir: string = luaDir): LuaSources {
  if (dir === luaDir && cached !== null) return cached;
  if (!dir) throw new Error('redis-tb: the script library is not in this build (run scripts/build.mjs)');
  const script = readFileSync(join(dir, 'tb.lua'), 'utf8');
  const out = { script, sha: sha1(script), functions: functionsLibrary(script, readFileSync(join(dir, 'functions.lua'), 'utf8')) };
  if (dir === luaDir) cached = out;
  return out;
}
