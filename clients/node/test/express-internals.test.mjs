// src/express.ts resolves a request's route template before Express routes it, by reading
// router fields Express does not document (no public interface gives the template before
// the route runs: `req.route` is set only inside the route's own handlers). The supported
// versions are pinned in package.json's peerDependencies; this test fails when the fields
// it reads change shape in either pinned major, so an upgrade is a visible decision.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import express5 from 'express';
import express4 from 'express-v4';

const require = createRequire(import.meta.url);
const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));

test('the peerDependencies pin the Express majors whose internals src/express.ts reads', () => {
  assert.equal(pkg.peerDependencies.express, '^4.18.0 || ^5.0.0');
  const v5 = require('express/package.json').version;
  const v4 = require('express-v4/package.json').version;
  assert.match(v5, /^5\./);
  assert.match(v4, /^4\.(1[89]|[2-9]\d)\./);
});

function apps(lib) {
  const app = lib();
  app.get('/items/:id', (req, res) => res.end());
  const users = lib.Router({ mergeParams: true });
  users.get('/posts/:pid', (req, res) => res.end());
  app.use('/users/:uid', users);
  return app;
}

test('Express 5: app.router.stack, layer.matchers / slash / rawPath, route.path and _handlesMethod, mounted handle.stack', () => {
  const app = apps(express5);
  const stack = app.router.stack;
  assert.ok(Array.isArray(stack));
  const routeLayer = stack.find((l) => l.route);
  assert.ok(routeLayer, 'a route layer');
  assert.ok(Array.isArray(routeLayer.matchers) && typeof routeLayer.matchers[0] === 'function');
  assert.deepEqual({ ...routeLayer.matchers[0]('/items/7') }.path, '/items/7');
  assert.equal(routeLayer.matchers[0]('/nope'), false);
  assert.equal(typeof routeLayer.slash, 'boolean');
  assert.equal(routeLayer.route.path, '/items/:id');
  assert.equal(typeof routeLayer.route._handlesMethod, 'function');
  assert.equal(routeLayer.route._handlesMethod('get'), true);
  assert.equal(routeLayer.route._handlesMethod('post'), false);
  const mount = stack.find((l) => !l.route && Array.isArray(l.handle?.stack));
  assert.ok(mount, 'a mounted router layer with handle.stack');
  assert.ok('rawPath' in mount || mount.matchers[0]('/users/u1/posts/p1'), 'the mount path is readable');
  assert.equal(mount.matchers[0]('/users/u1/posts/p1').path, '/users/u1');
});

test('Express 4: app._router.stack, layer.regexp (fast_slash, fast_star) and keys, route._handles_method, mounted handle.stack', () => {
  const app = apps(express4);
  let threw = false;
  try { void app.router; } catch { threw = true; }
  assert.ok(threw || app.router === undefined || app._router, 'Express 4: app.router is not the router');
  const stack = app._router.stack;
  assert.ok(Array.isArray(stack));
  const routeLayer = stack.find((l) => l.route);
  assert.ok(routeLayer.regexp instanceof RegExp);
  assert.equal(typeof routeLayer.regexp.fast_slash, 'boolean');
  assert.equal(routeLayer.route.path, '/items/:id');
  assert.equal(typeof routeLayer.route._handles_method, 'function');
  assert.equal(routeLayer.route._handles_method('get'), true);
  const mount = stack.find((l) => !l.route && Array.isArray(l.handle?.stack));
  assert.ok(mount);
  assert.deepEqual(mount.keys.map((k) => k.name), ['uid']);
  const m = mount.regexp.exec('/users/u1/posts/p1');
  assert.equal(m[0], '/users/u1');
  assert.equal(m[1], 'u1');
});
