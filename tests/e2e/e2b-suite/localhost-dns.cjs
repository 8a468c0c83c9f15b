// Preloaded into every Node process of the suite (NODE_OPTIONS=--require): names under
// .localhost resolve to loopback (RFC 6761, 6.3) without asking the system's resolver. abxd's
// sandbox hosts are <port>-<id>.localhost and some of E2B's tests fetch them, so no lookup of
// such a name ever leaves the machine. Every other name goes to the real dns.lookup.
'use strict';
const dns = require('node:dns');

const isLocalhost = (h) => typeof h === 'string' && /(^|\.)localhost\.?$/i.test(h);

const lookup = dns.lookup;
dns.lookup = function (hostname, options, callback) {
  if (!isLocalhost(hostname)) return lookup.apply(this, arguments);
  if (typeof options === 'function') [callback, options] = [options, {}];
  if (typeof options === 'number') options = { family: options };
  const family = options && (options.family === 6 || options.family === 'IPv6') ? 6 : 4;
  const address = family === 6 ? '::1' : '127.0.0.1';
  process.nextTick(() =>
    options && options.all ? callback(null, [{ address, family }]) : callback(null, address, family)
  );
  return {};
};

const plookup = dns.promises.lookup;
dns.promises.lookup = function (hostname, options) {
  if (!isLocalhost(hostname)) return plookup.apply(this, arguments);
  if (typeof options === 'number') options = { family: options };
  const family = options && (options.family === 6 || options.family === 'IPv6') ? 6 : 4;
  const address = family === 6 ? '::1' : '127.0.0.1';
  return Promise.resolve(options && options.all ? [{ address, family }] : { address, family });
};
