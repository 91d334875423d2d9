// Connects to an MCP server over Streamable HTTP with the official TypeScript SDK, lists its tools,
// searches, and prints one JSON summary on stdout; then tries a wrong token and reports the error.
//
//   MCPOWER_CLIENT_TOKEN=... node http.mjs URL       e.g. node http.mjs http://127.0.0.1:8765/mcp
//   MCPOWER_TEST_QUERY="..." (default: "harpsichord feature")
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url] = process.argv.slice(2);
if (!url) {
  console.error("usage: node http.mjs URL");
  process.exit(2);
}
const query = process.env.MCPOWER_TEST_QUERY ?? "harpsichord feature";
const token = process.env.MCPOWER_CLIENT_TOKEN;

// Never hang a test run.
setTimeout(() => {
  console.error("http.mjs: timed out after 45 s");
  process.exit(3);
}, 45_000).unref();

function connect(bearer) {
  const headers = bearer ? { Authorization: `Bearer ${bearer}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  return { transport, client: new Client({ name: "mcpower-node-http-test", version: "1.0.0" }) };
}

const { transport, client } = connect(token);
await client.connect(transport);
const { tools } = await client.listTools();
const result = await client.callTool({ name: "knowledge_search", arguments: { query, top_k: 3 } });
const text = result.content?.[0]?.text ?? "";
const structured = result.structuredContent ?? {};
const { resources } = await client.listResources();
const failed = await client.callTool({ name: "knowledge_search", arguments: { query, dataset: "no-such-dataset" } });
const session = transport.sessionId ?? null;
const protocolVersion = transport.protocolVersion ?? null;
await transport.terminateSession();
await client.close();

let wrongToken = null;
const wrong = connect("wrong-token-0123456789");
try {
  await wrong.client.connect(wrong.transport);
  wrongToken = "connected";
} catch (err) {
  wrongToken = { name: err.constructor.name, code: err.code ?? null };
}

console.log(
  JSON.stringify({
    server: client.getServerVersion(),
    session,
    protocolVersion,
    tools: tools.map((t) => t.name),
    isError: result.isError ?? false,
    status: structured.status,
    results: (structured.results ?? []).map((r) => ({ path: r.path, score: r.score, dataset: r.dataset })),
    textMatchesStructured: JSON.stringify(JSON.parse(text)) === JSON.stringify(structured),
    resources: resources.length,
    errorCode: failed.isError ? failed.structuredContent?.error?.code : null,
    wrongToken,
  }),
);
