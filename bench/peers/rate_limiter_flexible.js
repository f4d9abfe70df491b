// rate-limiter-flexible's RateLimiterRedis.consume() through ioredis: `depth` consumes in flight,
// closed loop, for `seconds` after a short warm-up. Prints one line of JSON.
// Usage: node rate_limiter_flexible.js <port> <depth> <seconds>
'use strict';
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

const [port, depth, seconds] = [Number(process.argv[2]), Number(process.argv[3]), Number(process.argv[4])];
const redis = new Redis({ port, host: '127.0.0.1', enableOfflineQueue: true, lazyConnect: false });
// Admits everything, so that every call writes, as the sluice run does.
const limiter = new RateLimiterRedis({ storeClient: redis, keyPrefix: 'rlflx', points: 1e12, duration: 1 });

let done = 0;
let errors = 0;
let stop = false;

function next() {
  limiter.consume('bench', 1).then(() => { ++done; }, () => { ++errors; }).then(() => { if (!stop) next(); });
}

redis.once('ready', () => {
  for (let i = 0; i < depth; ++i) next();
  setTimeout(() => {
    const before = done;
    const start = process.hrtime.bigint();
    setTimeout(() => {
      const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
      stop = true;
      console.log(JSON.stringify({ depth, decisions_per_second: Math.round((done - before) / elapsed), decisions: done, errors }));
      setTimeout(() => { redis.disconnect(); process.exit(errors === 0 ? 0 : 1); }, 200);
    }, seconds * 1000);
  }, 300);
});
