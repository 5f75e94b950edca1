// The end-to-end test support the Express and Fastify examples share.
export * from './processes.js';
export * from './headers.js';
export * from './stream-and-startup.js';
