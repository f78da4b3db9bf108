// The official clients of the two other APIs against a running `pagellm serve` (URL in argv[2],
// API key in argv[3]; the server runs a tool-aware chat template, Qwen 2.5's): the `openai`
// client's responses.create / responses.stream on POST /v1/responses, and `@anthropic-ai/sdk`'s
// messages.create / messages.stream / messages.countTokens on POST /v1/messages. Each is run
// whole and streamed, with a tool; stories260K never writes a tool call by itself, so the call is
// forced with vLLM's structured_outputs regex (a field both routes pass on to the chat request).
// Prints one line per failed check and ends with "N passed, N failed".
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { check, fail, finish, step } from "./checks.mjs";

const base = process.argv[2];
const key = process.argv[3];
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });
const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 60000 });
async function expectError(what, status, fn, cls, check_body) {
  try {
    await fn();
    fail(`${what}: no error`);
  } catch (e) {
    check(`${what}: status ${status}`, e.status === status, [e.status, String(e)]);
    check(`${what}: ${cls.name}`, e instanceof cls, e.constructor.name);
    if (check_body) check(`${what}: body`, check_body(e.error), e.error);
  }
}

const FORCE = { regex: '<tool_call>\n\\{"name": "get_weather", "arguments": \\{"city": "Paris"\\}\\}\n</tool_call>' };
const SCHEMA = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };

// ---- OpenAI Responses ----
const rtools = [{ type: "function", name: "get_weather", description: "Weather of a city", parameters: SCHEMA }];
let greedy = "";
await step("responses: whole", async () => {
  const r = await openai.responses.create({ model: "stories", instructions: "You tell stories.",
                                            input: "Once upon a time", max_output_tokens: 8, temperature: 0 });
  greedy = r.output_text;
  check("responses: object response", r.object === "response" && r.id.startsWith("resp_"), r);
  check("responses: a message with output_text", r.output.length === 1 && r.output[0].type === "message" &&
        r.output[0].content[0].type === "output_text" && greedy.length > 0, r.output);
  check("responses: incomplete at max_output_tokens", r.status === "incomplete" &&
        r.incomplete_details.reason === "max_output_tokens", [r.status, r.incomplete_details]);
  check("responses: usage", r.usage.output_tokens === 8 && r.usage.input_tokens > 0 &&
        r.usage.total_tokens === r.usage.input_tokens + 8, r.usage);
  check("responses: echoes instructions and max_output_tokens",
        r.instructions === "You tell stories." && r.max_output_tokens === 8, r);
});

await step("responses: streamed", async () => {
  const s = await openai.responses.create({ model: "stories", instructions: "You tell stories.",
                                            input: "Once upon a time", max_output_tokens: 8,
                                            temperature: 0, stream: true });
  const types = [], seqs = [];
  let text = "", last = null;
  for await (const e of s) {
    types.push(e.type);
    seqs.push(e.sequence_number);
    if (e.type === "response.output_text.delta") text += e.delta;
    last = e;
  }
  check("responses stream: the typed events in order", types[0] === "response.created" &&
        types[1] === "response.in_progress" && types[2] === "response.output_item.added" &&
        types[3] === "response.content_part.added" && types.includes("response.output_text.delta") &&
        types.includes("response.output_text.done") && types.includes("response.content_part.done") &&
        types.includes("response.output_item.done"), types);
  check("responses stream: sequence numbers 0, 1, ...", seqs.every((n, i) => n === i), seqs);
  check("responses stream: the deltas are the whole answer's text", text === greedy, [text, greedy]);
  check("responses stream: ends with the response and its usage", last.type === "response.incomplete" &&
        last.response.usage.output_tokens === 8 && last.response.output[0].content[0].text === greedy, last);
});

await step("responses: a tool call, whole, then its output sent back", async () => {
  const r = await openai.responses.create({ model: "stories", input: "Weather in Paris?", tools: rtools,
                                            tool_choice: "auto", max_output_tokens: 120,
                                            structured_outputs: FORCE });
  const call = r.output.find((o) => o.type === "function_call");
  check("responses tool: a function_call item", call && call.name === "get_weather" &&
        JSON.parse(call.arguments).city === "Paris" && call.call_id.length > 0, r.output);
  check("responses tool: completed", r.status === "completed", r.status);
  const r2 = await openai.responses.create({ model: "stories", tools: rtools, max_output_tokens: 4,
    input: [{ role: "user", content: "Weather in Paris?" }, call,
            { type: "function_call_output", call_id: call.call_id, output: "22C" }] });
  check("responses tool: the output sent back is answered", r2.output[0].type === "message" &&
        r2.output_text.length > 0, r2.output);
});

await step("responses: a tool call, streamed (responses.stream)", async () => {
  const s = openai.responses.stream({ model: "stories", input: "Weather in Paris?", tools: rtools,
                                      max_output_tokens: 120, structured_outputs: FORCE });
  const types = [];
  for await (const e of s) types.push(e.type);
  const r = await s.finalResponse();
  const call = r.output.find((o) => o.type === "function_call");
  check("responses tool stream: function call events", types.includes("response.function_call_arguments.delta") &&
        types.includes("response.function_call_arguments.done") && types.at(-1) === "response.completed", types);
  check("responses tool stream: the final response has the call", call && call.name === "get_weather" &&
        JSON.parse(call.arguments).city === "Paris", r.output);
});

await step("responses: text.format json_schema", async () => {
  const r = await openai.responses.create({ model: "stories", input: "A city", max_output_tokens: 60,
    text: { format: { type: "json_schema", name: "city", schema: { type: "object", properties:
      { n: { type: "integer", minimum: 0, maximum: 9 } }, required: ["n"], additionalProperties: false } } } });
  let ok = false;
  try { const v = JSON.parse(r.output_text); ok = Number.isInteger(v.n) && v.n >= 0 && v.n <= 9; } catch { ok = false; }
  check("responses json_schema: the text matches the schema", ok, r.output_text);
});

const named = (param) => (b) => b && b.param === param && b.message.includes(param);
await expectError("responses: previous_response_id refused", 400, () => openai.responses.create(
  { model: "stories", input: "x", previous_response_id: "resp_1" }), OpenAI.BadRequestError, named("previous_response_id"));
await expectError("responses: store true refused", 400, () => openai.responses.create(
  { model: "stories", input: "x", store: true }), OpenAI.BadRequestError, named("store"));
await expectError("responses: unknown input item type", 400, () => openai.responses.create(
  { model: "stories", input: [{ type: "image_generation_call", id: "x" }] }), OpenAI.BadRequestError,
  (b) => b.param === "input" && b.message.includes("input[0].type"));
await expectError("responses: input_image refused", 400, () => openai.responses.create(
  { model: "stories", input: [{ role: "user", content: [{ type: "input_image", image_url: "x" }] }] }),
  OpenAI.BadRequestError, (b) => b.param === "input" && b.message.includes("input[0].content[0].type"));
await expectError("responses: max_output_tokens of the wrong type", 400, () => openai.responses.create(
  { model: "stories", input: "x", max_output_tokens: "8" }), OpenAI.BadRequestError, named("max_output_tokens"));
await expectError("responses: input missing", 400, () => openai.responses.create(
  { model: "stories" }), OpenAI.BadRequestError, named("input"));
await expectError("responses: a hosted tool refused", 400, () => openai.responses.create(
  { model: "stories", input: "x", tools: [{ type: "web_search" }] }), OpenAI.BadRequestError, named("tools"));
await expectError("responses: an unknown model", 404, () => openai.responses.create(
  { model: "nope", input: "x" }), OpenAI.NotFoundError, named("model"));

// ---- Anthropic Messages ----
const atools = [{ name: "get_weather", description: "Weather of a city", input_schema: SCHEMA }];
const msgs = [{ role: "user", content: "Once upon a time" }];
let whole = null;
await step("messages: whole", async () => {
  const m = await anthropic.messages.create({ model: "stories", system: "You tell stories.", messages: msgs,
                                              max_tokens: 8, temperature: 0 });
  whole = m;
  check("messages: a message with a text block", m.type === "message" && m.role === "assistant" &&
        m.content.length === 1 && m.content[0].type === "text" && m.content[0].text.length > 0, m);
  check("messages: stop_reason max_tokens", m.stop_reason === "max_tokens" && m.stop_sequence === null, m);
  check("messages: usage", m.usage.output_tokens === 8 && m.usage.input_tokens + m.usage.cache_read_input_tokens > 0, m.usage);
});

await step("messages: countTokens", async () => {
  const c = await anthropic.messages.countTokens({ model: "stories", system: "You tell stories.", messages: msgs });
  check("countTokens: the prompt's tokens", whole && c.input_tokens ===
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens, [c, whole && whole.usage]);
  const t = await anthropic.messages.countTokens({ model: "stories", system: "You tell stories.", messages: msgs,
                                                   tools: atools });
  check("countTokens: tools count", t.input_tokens > c.input_tokens, [t, c]);
});

await step("messages: streamed", async () => {
  const s = await anthropic.messages.create({ model: "stories", system: "You tell stories.", messages: msgs,
                                              max_tokens: 8, temperature: 0, stream: true });
  const types = [];
  let text = "", stop = null;
  for await (const e of s) {
    types.push(e.type);
    if (e.type === "content_block_delta") text += e.delta.text;
    if (e.type === "message_delta") stop = e.delta.stop_reason;
  }
  check("messages stream: Anthropic's event sequence", types[0] === "message_start" &&
        types[1] === "content_block_start" && types.includes("content_block_delta") &&
        types.at(-3) === "content_block_stop" && types.at(-2) === "message_delta" &&
        types.at(-1) === "message_stop", types);
  check("messages stream: the same text and stop reason", whole && text === whole.content[0].text &&
        stop === "max_tokens", [text, stop]);
  const f = await anthropic.messages.stream({ model: "stories", system: "You tell stories.", messages: msgs,
                                              max_tokens: 8, temperature: 0 }).finalMessage();
  check("messages.stream: finalMessage", whole && f.content[0].text === whole.content[0].text &&
        f.usage.output_tokens === 8, f);
});

await step("messages: stop_sequences", async () => {
  const word = whole.content[0].text.trim().split(/\s+/).at(-1);
  const m = await anthropic.messages.create({ model: "stories", system: "You tell stories.", messages: msgs,
                                              max_tokens: 8, temperature: 0, stop_sequences: [word] });
  check("stop_sequences: stop_reason stop_sequence", m.stop_reason === "stop_sequence" &&
        m.stop_sequence === word, [m.stop_reason, m.stop_sequence, word]);
});

await step("messages: a tool call, whole, then its result sent back", async () => {
  const m = await anthropic.messages.create({ model: "stories", messages: [{ role: "user", content: "Weather in Paris?" }],
                                              tools: atools, tool_choice: { type: "auto" }, max_tokens: 120,
                                              structured_outputs: FORCE });
  const use = m.content.find((b) => b.type === "tool_use");
  check("messages tool: a tool_use block", use && use.name === "get_weather" && use.input.city === "Paris" &&
        use.id.startsWith("toolu_"), m.content);
  check("messages tool: stop_reason tool_use", m.stop_reason === "tool_use", m.stop_reason);
  const m2 = await anthropic.messages.create({ model: "stories", tools: atools, max_tokens: 4, messages: [
    { role: "user", content: "Weather in Paris?" }, { role: "assistant", content: m.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "22C" }] }] });
  check("messages tool: the result sent back is answered", m2.content[0].type === "text", m2.content);
});

await step("messages: a tool call, streamed", async () => {
  const s = anthropic.messages.stream({ model: "stories", messages: [{ role: "user", content: "Weather in Paris?" }],
                                        tools: atools, max_tokens: 120, structured_outputs: FORCE });
  const types = [];
  s.on("streamEvent", (e) => types.push(e.type === "content_block_delta" ? e.delta.type : e.type));
  const m = await s.finalMessage();
  const use = m.content.find((b) => b.type === "tool_use");
  check("messages tool stream: input_json_delta", types.includes("input_json_delta"), types);
  check("messages tool stream: the final message has the call", use && use.input.city === "Paris" &&
        m.stop_reason === "tool_use", m);
});

const antErr = (word) => (b) => b && b.type === "error" && b.error.type === "invalid_request_error" &&
  b.error.message.includes(word);
await expectError("messages: max_tokens missing", 400, () => anthropic.messages.create(
  { model: "stories", messages: msgs }), Anthropic.BadRequestError, antErr("max_tokens"));
await expectError("messages: an image block refused", 400, () => anthropic.messages.create(
  { model: "stories", max_tokens: 4, messages: [{ role: "user", content: [{ type: "image", source:
    { type: "base64", media_type: "image/png", data: "AA==" } }] }] }), Anthropic.BadRequestError,
  antErr("messages[0].content[0].type"));
await step("messages: tool_choice any forces a call", async () => {
  // an enum keeps the forced call short whatever the kernels sample (a free string may not
  // close within max_tokens)
  const cities = ["Paris", "Rome"];
  const m = await anthropic.messages.create({ model: "stories", max_tokens: 200, messages: msgs,
    tools: [{ name: "get_weather", description: "Weather of a city", input_schema: { type: "object",
      properties: { city: { enum: cities } }, required: ["city"] } }], tool_choice: { type: "any" } });
  const use = m.content.find((b) => b.type === "tool_use");
  check("messages tool_choice any: a tool_use of get_weather with one of the cities", use &&
        use.name === "get_weather" && cities.includes(use.input.city) &&
        m.stop_reason === "tool_use", m);
});
await expectError("messages: stop_sequences of the wrong type", 400, () => anthropic.messages.create(
  { model: "stories", max_tokens: 4, messages: msgs, stop_sequences: "x" }), Anthropic.BadRequestError,
  antErr("stop_sequences"));
await expectError("countTokens: messages missing", 400, () => anthropic.messages.countTokens(
  { model: "stories" }), Anthropic.BadRequestError, antErr("messages"));
const bad = new Anthropic({ baseURL: base, apiKey: "wrong", maxRetries: 0 });
await expectError("messages: a wrong x-api-key", 401, () => bad.messages.create(
  { model: "stories", max_tokens: 4, messages: msgs }), Anthropic.AuthenticationError,
  (b) => b.type === "error" && b.error.type === "authentication_error");

await step("still serving", async () => {
  const m = await anthropic.messages.create({ model: "stories", messages: msgs, max_tokens: 2 });
  check("messages after the errors", m.usage.output_tokens === 2, m.usage);
});
finish();
