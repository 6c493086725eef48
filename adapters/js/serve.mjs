#!/usr/bin/env node
// soak's JavaScript shim: `node adapters/js/serve.mjs ./my-store.mjs` serves the store the module
// creates over soak's wire protocol (docs/wire.md, section 7; adapters/js/README.md).
//
// stdout carries responses only: anything the store prints (console.log, process.stdout.write)
// goes to stderr. Requests are answered one at a time, in order; the child exits at stdin's end
// (after answering what was already sent) and after `close`.

import { Server } from './lib/wire.mjs';

const out = process.stdout.write.bind(process.stdout);
const toStderr = (...args) => console.error(...args);
console.log = toStderr;
console.info = toStderr;
console.debug = toStderr;
process.stdout.write = (chunk, encoding, cb) => process.stderr.write(chunk, encoding, cb);

const server = new Server(process.argv[2]);
const lines = [];
let buffered = '';
let ended = false;
let busy = false;

function send(line) {
  return new Promise((done) => out(line + '\n', done));
}

async function finish(code) {
  await server.close();
  process.exit(code);
}

async function drain() {
  if (busy) return;
  busy = true;
  while (lines.length) {
    const line = lines.shift();
    if (!line.trim()) continue;
    const response = await server.handle(line);
    await send(response);
    if (server.closed) return finish(0);
  }
  busy = false;
  if (ended) await finish(0);
}

process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => {
  buffered += chunk;
  let nl;
  while ((nl = buffered.indexOf('\n')) >= 0) {
    lines.push(buffered.slice(0, nl));
    buffered = buffered.slice(nl + 1);
  }
  drain();
});
process.stdin.on('end', () => {
  ended = true;
  if (buffered.trim()) lines.push(buffered);
  buffered = '';
  drain();
});
// A parent gone while we write: nothing is listening, so end quietly.
process.stdout.on('error', () => finish(0));
