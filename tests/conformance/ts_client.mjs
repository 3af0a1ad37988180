// Drive one stdio MCP server with the official TypeScript SDK client, as most MCP hosts do.
//
// Reads a JSON plan on stdin:
//   {"command": str, "args": [str], "env": {str: str}, "cwd": str, "stderr": path,
//    "calls": [{"name": str, "arguments": {...}}]}
// (without "env" the server gets this process's whole environment: a crew session runs the client)
// where an argument {"$ref": [index, "key", ...]} stands for an earlier call's result at that path
// and prints one JSON report on stdout:
//   {"serverInfo", "tools", "schemaProblems": [{"tool", "schema", "error"}],
//    "calls": [{"name", "result"} | {"name", "thrown": {"code", "message"}}]}
// Tools are listed before any call, so the client caches each tool's output-schema validator and
// callTool validates structuredContent exactly as in a host. A thrown call is reported, not fatal:
// that is the failure the conformance tests look for.
import { openSync, closeSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

function resolveRefs(value, report) {
  if (Array.isArray(value)) return value.map((item) => resolveRefs(item, report));
  if (value && typeof value === 'object') {
    const keys = Object.keys(value);
    if (keys.length === 1 && keys[0] === '$ref') {
      const [index, ...path] = value.$ref;
      return path.reduce((found, key) => found[key], report.calls[index].result ?? {});
    }
    return Object.fromEntries(keys.map((key) => [key, resolveRefs(value[key], report)]));
  }
  return value;
}

function thrown(error) {
  return { code: error?.code ?? null, message: String(error?.message ?? error) };
}

const plan = await readStdin();
const stderr = openSync(plan.stderr, 'a');
const transport = new StdioClientTransport({
  command: plan.command, args: plan.args, env: plan.env ?? process.env, cwd: plan.cwd, stderr,
});
const client = new Client({ name: 'kirocrew-conformance', version: '1.0.0' });
const report = { serverInfo: null, tools: [], schemaProblems: [], calls: [] };
try {
  await client.connect(transport);
  report.serverInfo = client.getServerVersion() ?? null;
  report.tools = (await client.listTools()).tools;
  // Every schema must compile with the validator the client itself uses for output schemas.
  const compiler = new AjvJsonSchemaValidator();
  for (const tool of report.tools) {
    for (const which of ['inputSchema', 'outputSchema']) {
      if (tool[which] === undefined) continue;
      try {
        compiler.getValidator(tool[which]);
      } catch (error) {
        report.schemaProblems.push({ tool: tool.name, schema: which, error: String(error?.message ?? error) });
      }
    }
  }
  for (const call of plan.calls) {
    try {
      const args = resolveRefs(call.arguments, report);
      report.calls.push({ name: call.name, result: await client.callTool({ name: call.name, arguments: args }) });
    } catch (error) {
      report.calls.push({ name: call.name, thrown: thrown(error) });
    }
  }
} finally {
  await client.close();
  closeSync(stderr);
}
process.stdout.write(JSON.stringify(report) + '\n');
