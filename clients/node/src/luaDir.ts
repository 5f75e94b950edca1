/**
 * The folder of the script library's two files (clients/lua: tb.lua, functions.lua) in the
 * installed package, `dist/lua`. scripts/build.mjs copies them there from clients/lua (the
 * one source) and replaces this file in each output (ESM: from `import.meta.url`, CommonJS:
 * from `__dirname`), which one TypeScript source cannot say for both.
 */
export const luaDir: string = '';
