// Spawns an MCP server over stdio with the official TypeScript SDK, lists its tools, searches,
// and prints one JSON summary on stdout.
//
//   node search.mjs COMMAND [ARGS...]            e.g. node search.mjs mcpower serve --stdio
//   MCPOWER_TEST_QUERY="..." (default: "harpsichord feature")
//
// The SDK validates structuredContent against each tool's outputSchema, so a schema mismatch fails here.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = process.argv.slice(2);
if (!command) {
  console.error("usage: node search.mjs COMMAND [ARGS...]");
  process.exit(2);
}
const query = process.env.MCPOWER_TEST_QUERY ?? "harpsichord feature";

// Never hang a test run.
setTimeout(() => {
  console.error("search.mjs: timed out after 45 s");
  process.exit(3);
}, 45_000).unref();

const transport = new StdioClientTransport({ command, args, env: { ...process.env }, stderr: "inherit" });
const client = new Client({ name: "mcpower-node-test", version: "1.0.0" });
await client.connect(transport);

const { tools } = await client.listTools();
const result = await client.callTool({ name: "knowledge_search", arguments: { query, top_k: 3 } });
const text = result.content?.[0]?.text ?? "";
const structured = result.structuredContent ?? {};
const { resources } = await client.listResources();
const failed = await client.callTool({ name: "knowledge_search", arguments: { query, dataset: "no-such-dataset" } });
// Budgets, pages, freshness and the watch fields: optional members of the output schemas.
const budgeted = await client.callTool({ name: "knowledge_search", arguments: { query, top_k: 3, max_tokens: 150, offset: 0 } });
const listed = await client.callTool({ name: "knowledge_list_datasets", arguments: {} });
const source = await client.callTool({
  name: "knowledge_get_source",
  arguments: { result_id: structured.results?.[0]?.result_id ?? "x:0000000000000000", max_tokens: 100 },
});

console.log(
  JSON.stringify({
    server: client.getServerVersion(),
    protocolVersion: transport._protocolVersion ?? null,
    tools: tools.map((t) => t.name),
    isError: result.isError ?? false,
    status: structured.status,
    results: (structured.results ?? []).map((r) => ({ path: r.path, score: r.score, dataset: r.dataset })),
    textMatchesStructured: JSON.stringify(JSON.parse(text)) === JSON.stringify(structured),
    resources: resources.length,
    errorCode: failed.isError ? failed.structuredContent?.error?.code : null,
    budgetMeta: budgeted.structuredContent?.meta ?? null,
    stale: (structured.results ?? []).map((r) => r.stale),
    watched: (listed.structuredContent?.datasets ?? []).map((d) => d.watched),
    sourceTruncated: source.structuredContent?.truncated ?? null,
  }),
);
await client.close();
