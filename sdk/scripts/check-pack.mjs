// Checks what `npm pack` would publish: the entries and their types (lib/,
// the committed build of src/) are in the tarball, tests, sources and source
// maps are not, and the browser entry's import graph reaches nothing of Node
// (no node: modules, no ws).

import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";

const out = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { encoding: "utf8" });
const [pack] = JSON.parse(out);
const files = new Set(pack.files.map((f) => f.path));
const problems = [];
for (const want of ["package.json", "README.md", "LICENSE", "lib/index.js", "lib/index.d.ts", "lib/browser.js", "lib/browser.d.ts", "lib/protocol.d.ts", "lib/session.d.ts"]) {
  if (!files.has(want)) problems.push(`missing from the package: ${want}`);
}
for (const f of files) {
  if (f.startsWith("dist/") || f.endsWith(".map") || f.startsWith("src/") || f.startsWith("test/")) problems.push(`should not be published: ${f}`);
}
const pkg = JSON.parse(readFileSync("package.json", "utf8"));
if (pkg.private) problems.push("package.json says private: true");
if (pkg.license !== "Apache-2.0") problems.push(`license is ${String(pkg.license)}, want Apache-2.0`);

// The browser entry's static import graph.
const seen = new Set();
const stack = ["lib/browser.js"];
while (stack.length > 0) {
  const file = stack.pop();
  if (seen.has(file)) continue;
  seen.add(file);
  const text = readFileSync(file, "utf8");
  for (const m of text.matchAll(/(?:import|export)\s[^;]*?from\s+"([^"]+)"|import\s*\(\s*"([^"]+)"\s*\)/g)) {
    const spec = m[1] ?? m[2];
    if (spec.startsWith(".")) stack.push(normalize(join(dirname(file), spec)));
    else problems.push(`${file} imports ${spec}: the browser entry must not import Node modules or ws`);
  }
}

if (problems.length > 0) {
  console.error(problems.join("\n"));
  process.exit(1);
}
console.log(`npm pack: ${pack.filename}, ${String(pack.files.length)} files, ${String(pack.size)} bytes; browser entry: ${String(seen.size)} modules, no Node imports`);
