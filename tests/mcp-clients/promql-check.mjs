// Parses each PromQL expression given (one per line on stdin) with
// Prometheus's own grammar (@prometheus-io/lezer-promql) and prints one JSON
// line per expression: {"expr", "ok", "error"}. Used by the chart's alert test.
import { parser } from "@prometheus-io/lezer-promql";
import { readFileSync } from "node:fs";

const expressions = JSON.parse(readFileSync(0, "utf8"));
for (const expr of expressions) {
  const tree = parser.parse(expr);
  let error = null;
  tree.iterate({
    enter(node) {
      if (error === null && node.type.isError) {
        error = `syntax error at ${node.from}: ${JSON.stringify(expr.slice(Math.max(0, node.from - 10), node.to + 10))}`;
      }
    },
  });
  console.log(JSON.stringify({ expr, ok: error === null, error }));
}
