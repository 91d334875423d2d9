// Spawns an MCP server over stdio with the official TypeScript SDK, lists its datasets, searches
// each of them, all of them together and one that does not exist, and prints one JSON summary.
//
//   node broken.mjs COMMAND [ARGS...]            e.g. node broken.mjs mcpower serve --stdio
//   MCPOWER_TEST_QUERY="..." (default: "sourdough starter")
//
// The SDK validates structuredContent against each tool's outputSchema, errors included.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = process.argv.slice(2);
if (!command) {
  console.error("usage: node broken.mjs COMMAND [ARGS...]");
  process.exit(2);
}
const query = process.env.MCPOWER_TEST_QUERY ?? "sourdough starter";

// Never hang a test run.
setTimeout(() => {
  console.error("broken.mjs: timed out after 240 s");
  process.exit(3);
}, 240_000).unref();

const transport = new StdioClientTransport({ command, args, env: { ...process.env }, stderr: "inherit" });
const client = new Client({ name: "mcpower-node-broken", version: "1.0.0" });
await client.connect(transport);

const answer = (dataset, result) => ({
  dataset,
  isError: result.isError ?? false,
  code: result.structuredContent?.error?.code ?? null,
  message: result.structuredContent?.error?.message ?? null,
  status: result.structuredContent?.status ?? null,
  results: (result.structuredContent?.results ?? []).length,
  notes: result.structuredContent?.meta?.notes ?? [],
});

const listed = await client.callTool({ name: "knowledge_list_datasets", arguments: {} });
const datasets = listed.structuredContent?.datasets ?? [];
const searches = [];
for (const d of [...datasets.map((d) => d.id), null, "no-such-dataset"]) {
  const params = d === null ? { query } : { query, dataset: d };
  searches.push(answer(d, await client.callTool({ name: "knowledge_search", arguments: params })));
}
console.log(
  JSON.stringify({
    listed: datasets.map((d) => ({ id: d.id, status: d.status, error: d.error ?? null })),
    searches,
  }),
);
await client.close();
