// Thinking and tool calls through the official clients against `pagellm serve` running one
// family's chat template (URL in argv[2], the family in argv[3]: qwen3, mistral3, gemma4 or
// gpt_oss; FAMILIES below holds each one's format): reasoning_content and content separated,
// whole and streamed (no delta holds part of a tag), reasoning_tokens counted, a tool call parsed
// whole and streamed (id and name first, then the arguments in pieces), tool_choice "required"
// giving a valid call, thinking switched by chat_template_kwargs, and the Responses / Messages
// APIs' reasoning item and thinking block. Prints failed checks and ends with "N passed, N failed".
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { check, fail, finish, step } from "./checks.mjs";

const base = process.argv[2];
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0, timeout: 60000 });
const anthropic = new Anthropic({ baseURL: base, apiKey: "none", maxRetries: 0, timeout: 60000 });

// What each family's model writes (stories260K writes whatever the regexes allow, so the text is
// the format a real model of the family writes): a thinking then "Yes, it is.", a thinking then
// a call of get_weather({"city": "Paris"}); the tags no delta may hold; the kwargs that switch
// the thinking on and off in its template (null: the template has no switch).
const FAMILIES = {
  qwen3: {
    think: "<think>\nI think so\\.\n</think>\n\nYes, it is\\.",
    call: '<think>\nLook it up\\.\n</think>\n\n<tool_call>\n\\{"name": "get_weather", "arguments": \\{"city": "Paris"\\}\\}\n</tool_call>',
    tags: /<\/?think|<tool_call|<\/tool_call/,
    on: {}, off: { enable_thinking: false },
  },
  mistral3: { // Ministral 3 Reasoning: its template always asks for the thinking
    think: "\\[THINK\\]I think so\\.\\[/THINK\\]Yes, it is\\.",
    call: '\\[THINK\\]Look it up\\.\\[/THINK\\]\\[TOOL_CALLS\\]get_weather\\[ARGS\\]\\{"city": "Paris"\\}',
    tags: /\[\/?THINK|\[TOOL_CALLS|\[ARGS/,
    on: null, off: null,
  },
  gemma4: { // thinking off unless enable_thinking
    think: "<\\|channel>thought\nI think so\\.<channel\\|>Yes, it is\\.",
    call: '<\\|channel>thought\nLook it up\\.<channel\\|><\\|tool_call>call:get_weather\\{city:<\\|"\\|>Paris<\\|"\\|>\\}<tool_call\\|>',
    tags: /<\|channel>|<channel\||<\|tool_call>|<tool_call\|>|<\|"\|>/,
    on: { enable_thinking: true }, off: { enable_thinking: false },
  },
  gpt_oss: { // harmony: the analysis channel is the thinking, final the answer; no switch to off
    think: "<\\|channel\\|>analysis<\\|message\\|>I think so\\.<\\|end\\|><\\|start\\|>assistant<\\|channel\\|>final<\\|message\\|>Yes, it is\\.",
    call: "<\\|channel\\|>analysis<\\|message\\|>Look it up\\.<\\|end\\|><\\|start\\|>assistant<\\|channel\\|>commentary to=functions\\.get_weather <\\|constrain\\|>json<\\|message\\|>\\{\"city\": \"Paris\"\\}<\\|call\\|>",
    tags: /<\|channel\||<\|message\||<\|end\||<\|start\||<\|call\||<\|constrain\|/,
    on: null, off: null, scale: 3, // its tags are many tokens in stories260K's vocabulary
  },
};
const fam = FAMILIES[process.argv[3] || "qwen3"];
if (!fam) { console.log(`unknown family ${process.argv[3]}`); process.exit(2); }
const user = [{ role: "user", content: "Is it sunny?" }];
const THINK = { regex: fam.think };
const TAGS = fam.tags;
const mt = (n) => n * (fam.scale || 1); // max_tokens for a format's length

await step("chat: thinking and answer separated", async () => {
  const r = await openai.chat.completions.create({ model: "stories", messages: user, max_tokens: mt(60),
                                                   structured_outputs: THINK });
  const m = r.choices[0].message;
  check("reasoning_content", m.reasoning_content === "I think so.", m);
  check("content", m.content === "Yes, it is.", m);
  check("reasoning_tokens counted", r.usage.completion_tokens_details.reasoning_tokens > 0 &&
        r.usage.completion_tokens_details.reasoning_tokens < r.usage.completion_tokens, r.usage);
});

await step("chat: thinking and answer separated, streamed", async () => {
  const s = await openai.chat.completions.create({ model: "stories", messages: user, max_tokens: mt(60),
    structured_outputs: THINK, stream: true, stream_options: { include_usage: true } });
  let reasoning = "", content = "", pieces = 0, tags = 0, usage = null, fin = null;
  for await (const c of s) {
    if (c.usage) usage = c.usage;
    const ch = c.choices[0];
    if (!ch) continue;
    if (ch.finish_reason) fin = ch.finish_reason;
    const d = ch.delta;
    if (d.reasoning_content) { reasoning += d.reasoning_content; pieces++; tags += TAGS.test(d.reasoning_content); }
    if (d.content) { content += d.content; tags += TAGS.test(d.content); }
  }
  check("stream: reasoning", reasoning === "I think so.", reasoning);
  check("stream: content", content === "Yes, it is.", content);
  check("stream: the thinking came in one or more pieces", pieces >= 1, pieces);
  check("stream: no delta holds a tag", tags === 0, tags);
  check("stream: finish_reason stop", fin === "stop", fin);
  check("stream: reasoning_tokens", usage && usage.completion_tokens_details.reasoning_tokens > 0, usage);
});

const SCHEMA = { type: "object", properties: { city: { type: "string", enum: ["Paris", "London"] } },
                 required: ["city"] };
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city",
                                               parameters: SCHEMA } }];
const CALL = { regex: fam.call };

await step("chat: a tool call parsed", async () => {
  const r = await openai.chat.completions.create({ model: "stories", messages: user, max_tokens: mt(120),
                                                   tools, tool_choice: "auto", structured_outputs: CALL });
  const m = r.choices[0].message, c = m.tool_calls && m.tool_calls[0];
  check("tool call: name and arguments", c && c.function.name === "get_weather" &&
        JSON.parse(c.function.arguments).city === "Paris" && /^call_/.test(c.id), m);
  check("tool call: the thinking beside it", m.reasoning_content === "Look it up." && m.content === null, m);
  check("tool call: finish_reason", r.choices[0].finish_reason === "tool_calls", r.choices[0].finish_reason);
});

await step("chat: a tool call parsed, streamed", async () => {
  const s = await openai.chat.completions.create({ model: "stories", messages: user, max_tokens: mt(120),
                                                   tools, structured_outputs: CALL, stream: true });
  let first = null, args = "", pieces = 0, content = "", fin = null, reasoning = "";
  for await (const c of s) {
    const ch = c.choices[0];
    if (!ch) continue;
    if (ch.finish_reason) fin = ch.finish_reason;
    if (ch.delta.content) content += ch.delta.content;
    if (ch.delta.reasoning_content) reasoning += ch.delta.reasoning_content;
    for (const t of ch.delta.tool_calls || []) {
      if (!first) first = t;
      else check("stream: later pieces carry no name", !t.function.name && t.index === 0, t);
      args += t.function.arguments || "";
      pieces++;
    }
  }
  check("stream: id and name first", first && /^call_/.test(first.id) && first.function.name === "get_weather" &&
        first.index === 0, first);
  // how many pieces depends on how many tokens each poll brings (test_server_parse.c streams
  // every split); they add up to the arguments
  check("stream: arguments pieces add up", pieces >= 1 && JSON.parse(args).city === "Paris", [pieces, args]);
  check("stream: no content, the thinking apart", content === "" && reasoning === "Look it up.", [content, reasoning]);
  check("stream: finish_reason tool_calls", fin === "tool_calls", fin);
});

await step("chat: tool_choice required gives a valid call", async () => {
  for (const stream of [false, true]) {
    const req = { model: "stories", messages: user, max_tokens: mt(200), tools, tool_choice: "required",
                  temperature: 1, seed: 7 };
    let call, fin;
    if (!stream) {
      const r = await openai.chat.completions.create(req);
      call = r.choices[0].message.tool_calls && r.choices[0].message.tool_calls[0];
      fin = r.choices[0].finish_reason;
      if (call) call = { name: call.function.name, args: call.function.arguments };
    } else {
      const s = await openai.chat.completions.create({ ...req, stream: true });
      for await (const c of s) {
        const ch = c.choices[0];
        if (!ch) continue;
        if (ch.finish_reason) fin = ch.finish_reason;
        for (const t of ch.delta.tool_calls || []) {
          if (!call) call = { name: t.function.name, args: "" };
          call.args += t.function.arguments || "";
        }
      }
    }
    let args = null;
    try { args = JSON.parse(call.args); } catch { /* checked below */ }
    check(`required${stream ? ", streamed" : ""}: a call of the tool with valid arguments`,
          call && call.name === "get_weather" && args && ["Paris", "London"].includes(args.city), call);
    check(`required${stream ? ", streamed" : ""}: finish_reason tool_calls`, fin === "tool_calls", fin);
  }
});

await step("chat: thinking switched off by chat_template_kwargs", async () => {
  if (!fam.off) {
    console.log(`(${process.argv[3]}: the chat template has no switch for the thinking: nothing to switch off)`);
    return;
  }
  const ask = (kw) => openai.chat.completions.create({ model: "stories", messages: user, max_tokens: 8,
    structured_outputs: { regex: "Yes\\." }, ...(kw ? { chat_template_kwargs: kw } : {}) });
  const on = await ask(Object.keys(fam.on).length ? fam.on : null), off = await ask(fam.off);
  // the template writes a different prompt with the thinking off (Qwen3 closes an empty block,
  // Gemma 4 leaves out its <|think|> instruction)
  check("the kwarg reaches the template (another prompt)",
        off.usage.prompt_tokens !== on.usage.prompt_tokens, [on.usage, off.usage]);
  const m = off.choices[0].message;
  check("no thinking, the answer as content", m.content === "Yes." && m.reasoning_content === null, m);
  check("no reasoning tokens", off.usage.completion_tokens_details.reasoning_tokens === 0, off.usage);
});

await step("responses: a reasoning item before the message", async () => {
  const r = await openai.responses.create({ model: "stories", input: "Is it sunny?", max_output_tokens: mt(60),
                                            structured_outputs: THINK });
  check("responses: reasoning item", r.output[0].type === "reasoning" &&
        r.output[0].content[0].text === "I think so.", r.output);
  check("responses: message after it", r.output[1].type === "message" && r.output_text === "Yes, it is.", r.output);
  check("responses: reasoning_tokens", r.usage.output_tokens_details.reasoning_tokens > 0, r.usage);
  const s = openai.responses.stream({ model: "stories", input: "Is it sunny?", max_output_tokens: mt(60),
                                      structured_outputs: THINK });
  const types = [];
  for await (const e of s) types.push(e.type);
  const f = await s.finalResponse();
  check("responses stream: reasoning events then text", types.indexOf("response.reasoning_text.delta") >= 0 &&
        types.indexOf("response.reasoning_text.delta") < types.indexOf("response.output_text.delta"), types);
  check("responses stream: final response", f.output[0].type === "reasoning" && f.output[1].content[0].text === "Yes, it is.", f.output);
});

await step("messages: a thinking block before the text", async () => {
  const m = await anthropic.messages.create({ model: "stories", max_tokens: mt(60), structured_outputs: THINK,
                                              messages: [{ role: "user", content: "Is it sunny?" }] });
  check("messages: thinking block", m.content[0].type === "thinking" && m.content[0].thinking === "I think so.", m.content);
  check("messages: text block", m.content[1].type === "text" && m.content[1].text === "Yes, it is.", m.content);
  const s = anthropic.messages.stream({ model: "stories", max_tokens: mt(60), structured_outputs: THINK,
                                        messages: [{ role: "user", content: "Is it sunny?" }] });
  const f = await s.finalMessage();
  check("messages stream: thinking then text", f.content[0].type === "thinking" && f.content[0].thinking === "I think so." &&
        f.content[1].text === "Yes, it is.", f.content);
});

finish();
