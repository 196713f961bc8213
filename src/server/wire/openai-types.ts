/**
 * OpenAI Chat Completions wire shapes, as far as the gateway reads or writes them.
 * Deliberately permissive: providers add fields, and unknown ones must pass through.
 */

export type Extra = { [key: string]: unknown };

export type ChatTextPart = { type: "text"; text: string } & Extra;
export type ChatImagePart = {
  type: "image_url";
  image_url: { url: string; detail?: "auto" | "low" | "high" | string };
} & Extra;
export type ChatFilePart = {
  type: "file";
  file: { file_data?: string; file_id?: string; filename?: string };
} & Extra;
export type ChatRefusalPart = { type: "refusal"; refusal: string } & Extra;
export type ChatContentPart =
  | ChatTextPart
  | ChatImagePart
  | ChatFilePart
  | ChatRefusalPart
  | ({ type: string } & Extra);

export type ChatToolCall = {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
} & Extra;
/** A call of a `custom` (free-form) tool: its input is the model's text, not JSON arguments. */
export type ChatCustomToolCall = {
  id: string;
  type: "custom";
  custom: { name: string; input: string };
} & Extra;

export type ChatSystemMessage = {
  role: "system" | "developer";
  content: string | ChatContentPart[];
  name?: string;
} & Extra;
export type ChatUserMessage = {
  role: "user";
  content: string | ChatContentPart[];
  name?: string;
} & Extra;
export type ChatAssistantMessage = {
  role: "assistant";
  content?: string | ChatContentPart[] | null;
  refusal?: string | null;
  tool_calls?: (ChatToolCall | ChatCustomToolCall)[];
  /** Legacy single function call, still sent by old clients. */
  function_call?: { name: string; arguments: string } | null;
  /** Reasoning text some OpenAI-compatible servers (DeepSeek, vLLM) return. */
  reasoning_content?: string | null;
  reasoning_details?: ReasoningDetail[];
  name?: string;
} & Extra;

/**
 * OpenRouter's `reasoning_details`: reasoning as the provider signed it, which a client sends back
 * unchanged on the assistant turn so an anthropic-wire model can keep thinking through a tool loop.
 * `after_tool_call_id` (the gateway's): the call of the same turn this reasoning came after, where
 * the model thought between its calls (interleaved thinking), which Anthropic must get back there.
 */
export type ReasoningDetail =
  | {
      type: "reasoning.text";
      text: string;
      signature?: string | null;
      format?: string;
      index?: number;
      after_tool_call_id?: string;
    }
  | {
      type: "reasoning.encrypted";
      data: string;
      format?: string;
      index?: number;
      after_tool_call_id?: string;
    };
export type ChatToolMessage = {
  role: "tool";
  tool_call_id: string;
  content: string | ChatContentPart[];
} & Extra;
export type ChatFunctionMessage = {
  role: "function";
  name: string;
  content: string | null;
} & Extra;
export type ChatMessage =
  | ChatSystemMessage
  | ChatUserMessage
  | ChatAssistantMessage
  | ChatToolMessage
  | ChatFunctionMessage;

export type ChatFunctionTool = {
  type: "function";
  function: {
    name: string;
    description?: string;
    parameters?: { [key: string]: unknown };
    strict?: boolean | null;
  };
} & Extra;
export type ChatTool = ChatFunctionTool | ({ type: string } & Extra);

export type ChatToolChoice =
  | "auto"
  | "none"
  | "required"
  | { type: "function"; function: { name: string } }
  | ({ type: string } & Extra);

export type ChatResponseFormat =
  | { type: "text" }
  | { type: "json_object" }
  | {
      type: "json_schema";
      json_schema: {
        name: string;
        description?: string;
        schema?: { [key: string]: unknown };
        strict?: boolean | null;
      };
    };

export type ChatCompletionRequest = {
  model: string;
  messages: ChatMessage[];
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  stop?: string | string[] | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean };
  tools?: ChatTool[];
  tool_choice?: ChatToolChoice;
  parallel_tool_calls?: boolean;
  response_format?: ChatResponseFormat;
  reasoning_effort?: string | null;
  user?: string;
  n?: number | null;
} & Extra;

export type ChatUsage = {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number; [key: string]: unknown } | null;
  completion_tokens_details?: { reasoning_tokens?: number; [key: string]: unknown } | null;
} & Extra;

export type ChatFinishReason =
  | "stop"
  | "length"
  | "tool_calls"
  | "content_filter"
  | "function_call";

export type ChatResponseMessage = {
  role: "assistant";
  content: string | null;
  refusal?: string | null;
  tool_calls?: ChatToolCall[];
  reasoning_content?: string | null;
} & Extra;

export type ChatChoice = {
  index: number;
  message: ChatResponseMessage;
  finish_reason: ChatFinishReason | null;
  logprobs?: unknown;
} & Extra;

export type ChatCompletionResponse = {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: ChatChoice[];
  usage?: ChatUsage;
} & Extra;

export type ChatToolCallDelta = {
  index: number;
  id?: string;
  type?: "function";
  function?: { name?: string; arguments?: string };
} & Extra;

export type ChatDelta = {
  role?: "assistant";
  content?: string | null;
  refusal?: string | null;
  tool_calls?: ChatToolCallDelta[];
  reasoning_content?: string | null;
  reasoning_details?: ReasoningDetail[];
} & Extra;

export type ChatChunkChoice = {
  index: number;
  delta: ChatDelta;
  finish_reason: ChatFinishReason | null;
  logprobs?: unknown;
} & Extra;

export type ChatCompletionChunk = {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: ChatChunkChoice[];
  usage?: ChatUsage | null;
} & Extra;

/** Body of an OpenAI error, both as an HTTP error and as an in-stream chunk. */
export type ChatErrorBody = {
  error: { message: string; type: string; code: string | null; param: string | null };
};
