// Turns a javascript or typescript cell into a script node's vm can run in the global scope
// (node_repl.js runs it). A script cannot hold `import`, `export` or a top-level `await`, and node
// cannot run types; E2B's kernels accept all of them, so a cell that has any is rewritten here with
// TypeScript's parser and transpiler (Debian's node-typescript in the image):
//
//   - typescript: transpiled first (types stripped, no type check; ES2022 target, imports kept);
//   - `import X, {a, b as c} from "m"` becomes `var X = default of require("m"), {a, b: c} = require("m")`
//     (`var`, so running the cell again, or importing a name twice, is no error); `export` is dropped;
//   - top-level `await`: the cell runs in an async function; its top-level declarations are hoisted
//     as `var`s of the global scope (so later cells see them) and become assignments, and a last
//     expression becomes the function's value, which node_repl.js awaits as the cell's result.
//
// A cell with none of these, in javascript, goes through untouched without loading TypeScript.
"use strict";

let tsModule = null;

// Debian's node-typescript is under /usr/share/nodejs; a test on a host names it with NODE_PATH.
function typescript() {
  if (tsModule) return tsModule;
  for (const name of ["typescript", "/usr/share/nodejs/typescript"]) {
    try {
      tsModule = require(name);
      return tsModule;
    } catch (e) {
      if (e.code !== "MODULE_NOT_FOUND") throw e;
    }
  }
  const e = new Error(
    "TypeScript is not installed in this sandbox, and this cell needs it (typescript, import, or top-level " +
      "await); sandlot's code-interpreter image has it (Debian's node-typescript)"
  );
  e.name = "MissingTypeScript";
  throw e;
}

// Cheap look at the text first: most cells have none of the words, and skip the parser.
const NEEDS_REWRITE = /\b(import|export|await)\b/;

function prepare(code, language) {
  if (language !== "typescript" && !NEEDS_REWRITE.test(code)) return code;
  const ts = typescript();
  let js = code;
  if (language === "typescript") {
    const out = ts.transpileModule(code, {
      reportDiagnostics: true,
      compilerOptions: {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        // No "use strict" line: the cell is not a module, and strict mode would break sloppy globals.
        noImplicitUseStrict: true,
        alwaysStrict: false,
      },
    });
    const errors = (out.diagnostics || []).filter((d) => d.category === ts.DiagnosticCategory.Error);
    if (errors.length) throw syntaxError(ts, errors[0]);
    js = out.outputText;
  }
  return rewrite(ts, js);
}

function syntaxError(ts, diagnostic) {
  const e = new SyntaxError(ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n"));
  if (diagnostic.file && diagnostic.start !== undefined) {
    const { line, character } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
    e.message += ` (line ${line + 1}, column ${character + 1})`;
  }
  return e;
}

function rewrite(ts, js) {
  const sf = ts.createSourceFile("cell.js", js, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
  if (sf.parseDiagnostics && sf.parseDiagnostics.length) throw syntaxError(ts, sf.parseDiagnostics[0]);
  const statements = sf.statements;
  const wrap = statements.some((s) => hasTopLevelAwait(ts, s));
  const hoisted = new Set();
  const parts = [];
  let last = 0;
  statements.forEach((st, i) => {
    const start = st.getStart(sf);
    parts.push(js.slice(last, start));
    last = st.end;
    const text = js.slice(start, st.end);
    parts.push(rewriteStatement(ts, sf, st, text, wrap, hoisted, i === statements.length - 1));
  });
  parts.push(js.slice(last));
  const body = parts.join("");
  if (!wrap) return body;
  const names = [...hoisted];
  return `${names.length ? `var ${names.join(", ")};` : ""}(async () => {${body}\n})()`;
}

function rewriteStatement(ts, sf, st, text, wrap, hoisted, isLast) {
  if (ts.isImportDeclaration(st)) return importAsRequire(ts, st, wrap, hoisted);
  if (ts.isExportDeclaration(st)) return "";
  if (ts.isExportAssignment(st)) return `${st.expression.getText(sf)};`;
  const exported = (st.modifiers || []).filter(
    (m) => m.kind === ts.SyntaxKind.ExportKeyword || m.kind === ts.SyntaxKind.DefaultKeyword
  );
  if (exported.length) {
    // `export const x = 1` is `const x = 1` here; the keywords are cut out of the statement's text.
    const base = st.getStart(sf);
    let cut = text;
    for (const m of [...exported].reverse()) {
      cut = cut.slice(0, m.getStart(sf) - base) + cut.slice(m.end - base);
    }
    text = cut;
  }
  if (!wrap) return text;
  if (ts.isVariableStatement(st)) {
    const assignments = [];
    for (const d of st.declarationList.declarations) {
      boundNames(ts, d.name, hoisted);
      if (d.initializer) assignments.push(`(${d.name.getText(sf)} = ${d.initializer.getText(sf)});`);
    }
    return assignments.join(" ");
  }
  if ((ts.isFunctionDeclaration(st) || ts.isClassDeclaration(st)) && st.name) {
    hoisted.add(st.name.text);
    return `${st.name.text} = ${text};`;
  }
  if (isLast && ts.isExpressionStatement(st)) return `return (${st.expression.getText(sf)});`;
  return text;
}

function importAsRequire(ts, st, wrap, hoisted) {
  const source = `require(${JSON.stringify(st.moduleSpecifier.text)})`;
  const clause = st.importClause;
  if (!clause) return `${source};`;
  if (clause.isTypeOnly) return "";
  const declarations = [];
  if (clause.name) {
    declarations.push([clause.name.text, `((m) => (m && m.__esModule && "default" in m ? m.default : m))(${source})`]);
  }
  const bindings = clause.namedBindings;
  if (bindings && ts.isNamespaceImport(bindings)) {
    declarations.push([bindings.name.text, source]);
  } else if (bindings) {
    const fields = bindings.elements
      .filter((e) => !e.isTypeOnly)
      .map((e) => (e.propertyName ? `${e.propertyName.text}: ${e.name.text}` : e.name.text));
    if (fields.length) declarations.push([`{${fields.join(", ")}}`, source]);
  }
  if (!declarations.length) return `${source};`;
  if (wrap) {
    for (const [target] of declarations) {
      for (const name of target.replace(/[{}]/g, "").split(",")) hoisted.add(name.split(":").pop().trim());
    }
    return declarations.map(([target, value]) => `(${target} = ${value});`).join(" ");
  }
  return `var ${declarations.map(([target, value]) => `${target} = ${value}`).join(", ")};`;
}

function boundNames(ts, name, into) {
  if (ts.isIdentifier(name)) {
    into.add(name.text);
    return;
  }
  for (const element of name.elements) {
    if (!ts.isOmittedExpression(element)) boundNames(ts, element.name, into);
  }
}

// An `await` (or `for await`) of the top level: not inside a function, whose own awaits are its own.
function hasTopLevelAwait(ts, node) {
  if (ts.isAwaitExpression(node)) return true;
  if (ts.isForOfStatement(node) && node.awaitModifier) return true;
  if (ts.isFunctionLike(node) || ts.isClassStaticBlockDeclaration(node)) return false;
  return ts.forEachChild(node, (child) => hasTopLevelAwait(ts, child)) || false;
}

module.exports = { prepare, typescript };
