// The javascript and typescript contexts of sandlot's code interpreter (server.py starts one node per
// context; SANDLOT_REPL_LANGUAGE says which).
//
// Cells arrive as JSON lines ({code, env}) on the pipe SANDLOT_REPL_IN names and are evaluated as
// scripts in this process's global scope, so top-level declarations stay between cells. The answer
// ({text} with the last expression's value, or {error: {name, value, traceback}}) goes to the pipe
// SANDLOT_REPL_OUT names; then a marker goes to stdout and stderr so the runner knows the cell's own
// output on them is complete (writes to pipes are synchronous in node on Linux, so order holds).
// SIGINT breaks a running script (breakOnSigint) or an awaited promise, and never ends the process.
//
// What a script cannot do is rewritten first, with TypeScript's parser (cell.js, next to this file):
// typescript cells lose their types, `import` becomes `require`, and a cell with top-level `await`
// runs in an async function whose declarations become globals. TypeScript is loaded only for a cell
// that needs it, so a plain cell does not pay for it.
"use strict";

const fs = require("fs");
const path = require("path");
const readline = require("readline");
const util = require("util");
const vm = require("vm");
const { createRequire } = require("module");
const { prepare, typescript } = require("./cell.js");

const token = process.env.SANDLOT_REPL_TOKEN;
const input = Number(process.env.SANDLOT_REPL_IN);
const output = Number(process.env.SANDLOT_REPL_OUT);
const language = process.env.SANDLOT_REPL_LANGUAGE || "javascript";
delete process.env.SANDLOT_REPL_TOKEN;
delete process.env.SANDLOT_REPL_IN;
delete process.env.SANDLOT_REPL_OUT;
delete process.env.SANDLOT_REPL_LANGUAGE;

// `require` (also what `import` becomes) resolves from the context's working directory, as it would
// in a script there.
globalThis.require = createRequire(path.join(process.cwd(), "cell.js"));

class Interrupted extends Error {}
let interrupt = null;
process.on("SIGINT", () => {
  if (interrupt) interrupt(new Interrupted("the cell was interrupted"));
});

// An error thrown later by a callback of an earlier cell must not end the context: it is printed.
process.on("uncaughtException", (e) => {
  process.stderr.write(`Uncaught ${e && e.stack ? e.stack : util.inspect(e)}\n`);
});

let count = 0;

// A result as E2B's JavaScript kernel shows it: a string as itself, anything else inspected.
function display(value) {
  return typeof value === "string" ? value : util.inspect(value);
}

async function run(code) {
  count += 1;
  const script = prepare(code, language);
  let value = vm.runInThisContext(script, { filename: `cell-${count}.js`, breakOnSigint: true });
  if (value && typeof value.then === "function") {
    value = await Promise.race([value, new Promise((_, reject) => (interrupt = reject))]);
  }
  return value === undefined ? {} : { text: display(value) };
}

function describe(e) {
  if (e instanceof Interrupted || (e && e.code === "ERR_SCRIPT_EXECUTION_INTERRUPTED")) {
    return { name: "KeyboardInterrupt", value: "the cell was interrupted", traceback: "" };
  }
  if (e instanceof Error) {
    // The frames below the cell are this driver's: not the user's business.
    const lines = String(e.stack || "").split("\n");
    const ours = lines.findIndex((l) => l.includes("node:vm") || l.includes(__filename));
    return { name: e.name, value: e.message, traceback: (ours < 0 ? lines : lines.slice(0, ours)).join("\n") };
  }
  return { name: "Error", value: util.inspect(e), traceback: "" };
}

async function cell(request) {
  const env = request.env || {};
  const saved = {};
  for (const k of Object.keys(env)) {
    saved[k] = Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : undefined;
    process.env[k] = env[k];
  }
  let reply;
  try {
    reply = await run(request.code);
  } catch (e) {
    reply = { error: describe(e) };
  } finally {
    interrupt = null;
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
  fs.writeSync(output, JSON.stringify(reply) + "\n");
  process.stdout.write(`\x1e${token}0\x1e`);
  process.stderr.write(`\x1e${token}\x1e`);
}

// One cell at a time, in order: the runner sends the next only after this one's markers.
const lines = readline.createInterface({ input: fs.createReadStream(null, { fd: input }) });
let chain = Promise.resolve();
lines.on("line", (line) => {
  chain = chain.then(() => cell(JSON.parse(line)));
});
lines.on("close", () => process.exit(0));

// A typescript context loads the compiler (seconds on a small machine) now, while no cell waits.
if (language === "typescript") {
  chain = chain.then(() => {
    try {
      typescript();
    } catch (e) {
      // Said again by the first cell, which needs it.
    }
  });
}
