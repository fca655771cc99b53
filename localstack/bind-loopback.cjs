// Preloaded into kinesis-mock (`node --require`): kinesis-local hard-codes host 0.0.0.0, so it
// would listen on every interface. This rewrites "any address" listens to 127.0.0.1.
'use strict';
const net = require('net');
const listen = net.Server.prototype.listen;
const ANY = new Set([undefined, null, '', '0.0.0.0', '::']);
const LOOPBACK = process.env.HEATSINK_BIND_HOST || '127.0.0.1';
net.Server.prototype.listen = function (...args) {
  const a = args[0];
  if (a !== null && typeof a === 'object' && !(a instanceof net.Server) && a.path === undefined && a.fd === undefined && a._handle === undefined && a.handle === undefined) {
    if (ANY.has(a.host)) args[0] = { ...a, host: LOOPBACK };
  } else if (typeof a === 'number' || (typeof a === 'string' && /^\d+$/.test(a))) {
    if (args.length < 2 || typeof args[1] === 'function') args.splice(1, 0, LOOPBACK);
    else if (ANY.has(args[1])) args[1] = LOOPBACK;
  }
  return listen.apply(this, args);
};
