-- The conversation key HAProxy routes on (docs/deploy.md, ADR 0024): the turns of one
-- conversation get the same key, so consistent hashing sends them to the replica that holds
-- their KV cache. In order of preference:
--   1. the X-Session-Id header ("s:" .. value, at most 256 bytes);
--   2. the OpenAI `user` field of the body ("u:" .. its JSON text);
--   3. the conversation's stable head: the raw JSON text of the system messages before the
--      first user message and of that first user message ("m:" .. ...), each cut at
--      PART_BYTES; a follow-up turn resends them unchanged, so its key is the same;
--   4. /v1/completions: the prompt's first line ("p:" .. ...), the part a growing prompt keeps.
-- Nothing found: no key, and HAProxy balances the request round robin.
--
-- The body is what HAProxy buffered (option http-buffer-request: up to tune.bufsize). A longer
-- body is cut, but always at the same byte, and the head of a conversation sits at the same
-- bytes in every turn (clients serialise the same messages the same way), so a cut head still
-- gives the same key. The scanner never decodes the JSON: it jumps between structural
-- characters with string.find, so a megabyte of base64 image costs a few C calls.

local PART_BYTES = 65536
local MAX_MESSAGES = 64  -- messages looked at for the head

-- b:byte(i) == '"': the index after the closing quote, or nil when the text is cut.
local function skip_string(b, i)
  local j = i + 1
  while true do
    local k = b:find('["\\]', j)
    if k == nil then return nil end
    if b:byte(k) == 34 then return k + 1 end
    j = k + 2  -- an escaped character
  end
end

-- The index after the JSON value that starts at i, or nil when the text is cut.
local function skip_value(b, i)
  local c = b:byte(i)
  if c == 34 then return skip_string(b, i) end
  if c == 123 or c == 91 then  -- { [
    local depth, j = 0, i
    while true do
      local k = b:find('[%[%]{}"]', j)
      if k == nil then return nil end
      local ch = b:byte(k)
      if ch == 34 then
        j = skip_string(b, k)
        if j == nil then return nil end
      else
        depth = (ch == 123 or ch == 91) and depth + 1 or depth - 1
        j = k + 1
        if depth == 0 then return j end
      end
    end
  end
  return b:find('[,%]}%s]', i)  -- a number, true, false, null
end

local function next_char(b, i) return b:find('%S', i) end

-- The members of the object that starts at i, name -> {first, after} (after is nil for a value
-- the text cuts); `want` stops the scan once those names are seen.
local function members(b, i, want)
  local out, seen = {}, 0
  i = next_char(b, i)
  if i == nil or b:byte(i) ~= 123 then return out end
  i = i + 1
  while true do
    i = next_char(b, i)
    if i == nil then return out end
    local c = b:byte(i)
    if c == 44 then
      i = i + 1
    elseif c ~= 34 then
      return out  -- '}' or not JSON
    else
      local e = skip_string(b, i)
      if e == nil then return out end
      local name = b:sub(i + 1, e - 2)
      local colon = next_char(b, e)
      if colon == nil or b:byte(colon) ~= 58 then return out end
      local v = next_char(b, colon + 1)
      if v == nil then return out end
      local after = skip_value(b, v)
      if out[name] == nil then
        out[name] = {v, after}
        if want[name] then
          seen = seen + 1
          if seen == want.count then return out end
        end
      end
      if after == nil then return out end
      i = after
    end
  end
end

-- The raw text of a value (cut at PART_BYTES or where the body ends).
local function raw(b, span)
  local last = (span[2] or (#b + 1)) - 1
  if last - span[1] + 1 > PART_BYTES then last = span[1] + PART_BYTES - 1 end
  return b:sub(span[1], last)
end

-- A JSON string value's text without its quotes, or nil for anything else.
local function string_value(b, span)
  if span == nil or span[2] == nil or b:byte(span[1]) ~= 34 then return nil end
  return b:sub(span[1] + 1, span[2] - 2)
end

local ROLE = {role = true, count = 1}

-- "m:" .. the system messages before the first user message .. that user message.
local function head_of_messages(b, span)
  local i = span[1]
  if b:byte(i) ~= 91 then return nil end
  i = i + 1
  local parts = {}
  for _ = 1, MAX_MESSAGES do
    i = next_char(b, i)
    if i == nil then break end
    local c = b:byte(i)
    if c == 44 then
      i = next_char(b, i + 1)
      if i == nil then break end
      c = b:byte(i)
    end
    if c ~= 123 then break end  -- ']' or not a message
    local after = skip_value(b, i)
    local role = string_value(b, members(b, i, ROLE).role)
    if role == "system" or role == "developer" or role == "user" then
      parts[#parts + 1] = raw(b, {i, after})
    end
    if role == "user" or after == nil then break end
    i = after
  end
  if #parts == 0 then return nil end
  return "m:" .. table.concat(parts, "\0")
end

local TOP = {user = true, messages = true, prompt = true, count = 3}

local function conversation_key(txn)
  local headers = txn.http:req_get_headers()
  local session = headers["x-session-id"]
  if session ~= nil and session[0] ~= nil and session[0] ~= "" then
    return "s:" .. session[0]:sub(1, 256)
  end
  local b = txn.sf:req_body()
  if b == nil or b == "" then return nil end
  local top = members(b, 1, TOP)
  local user = string_value(b, top.user)
  if user ~= nil and user ~= "" then return "u:" .. user:sub(1, 256) end
  if top.messages ~= nil then return head_of_messages(b, top.messages) end
  local prompt = string_value(b, top.prompt)
  if prompt ~= nil then
    local line = prompt:find("\\n", 1, true)
    return "p:" .. prompt:sub(1, math.min(line and line - 1 or #prompt, PART_BYTES))
  end
  return nil
end

-- Exported for the test harness (plain Lua, no HAProxy): tests/balancer/conversation_key_test.lua.
if core ~= nil then
  core.register_fetches("vls_conversation_key", conversation_key)
else
  return {key = conversation_key}
end
