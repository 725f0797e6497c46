// What the Node.js test beds' processes share (app.js, incident.js,
// rabbit.js): their role (the first argument), the environment they need,
// the ground-truth file (TRUTH_FILE, a JSON line per record) and a pause.
'use strict';
const fs = require('fs');

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
let truth;
const record = (o) => {
  truth = truth || fs.createWriteStream(env('TRUTH_FILE'), { flags: 'a' });
  truth.write(JSON.stringify(o) + '\n');
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// The ground truth written out, then the process ends.
const finish = () => (truth ? truth.end(() => process.exit(0)) : process.exit(0));

module.exports = { role: process.argv[2], env, record, sleep, finish };
