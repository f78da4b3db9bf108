// The bookkeeping the e2e node clients share: check() counts a condition and prints the failed
// ones, step() runs an async block and counts a throw as a failure, fail() counts one, finish()
// prints "N passed, N failed" (the line node_run in server_lib.sh reads) and exits 1 on a failure.
const tally = { passed: 0, failed: 0 };

export function check(what, cond, detail) {
  if (cond) tally.passed++;
  else fail(`${what}${detail !== undefined ? " " + JSON.stringify(detail) : ""}`);
}

export function fail(what) {
  tally.failed++;
  console.log(`FAIL: ${what}`);
}

export async function step(what, fn) {
  try { await fn(); } catch (e) { fail(`${what}: threw ${e}`); }
}

export function finish() {
  console.log(`${tally.passed} passed, ${tally.failed} failed`);
  process.exit(tally.failed ? 1 : 0);
}
