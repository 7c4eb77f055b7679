-- Unit test of deploy/haproxy/conversation_key.lua in plain Lua 5.3 (HAProxy embeds the same
-- Lua): the key every turn of a conversation gets, with HAProxy's txn faked.
--   lua5.3 tests/balancer/conversation_key_test.lua deploy/haproxy/conversation_key.lua
local ck = dofile(arg[1])
local failures = 0

local function key(body, headers, cut)
  if cut then body = body:sub(1, cut) end
  local h = {}
  for k, v in pairs(headers or {}) do h[k] = {[0] = v} end
  local txn = {
    http = {req_get_headers = function() return h end},
    sf = {req_body = function() return body end},
  }
  return ck.key(txn)
end

local function check(cond, what)
  if not cond then
    failures = failures + 1
    print("FAIL: " .. what)
  end
end

local function q(s) return '"' .. s .. '"' end
local function msg(role, content) return '{"role":' .. q(role) .. ',"content":' .. content .. '}' end
local function chat(messages, extra)
  return '{"model":"m","messages":[' .. table.concat(messages, ",") .. ']' .. (extra or "") ..
         ',"max_tokens":16}'
end

local sys = msg("system", q("You are terse. A \\\"quoted\\\" word, a brace } and a bracket ]."))
local u1 = msg("user", '[{"type":"text","text":"What is in the picture?"},' ..
                       '{"type":"image_url","image_url":{"url":"data:image/png;base64,' ..
                       string.rep("QUJD", 3000) .. '"}}]')
local a1 = msg("assistant", q("A cat."))
local u2 = msg("user", q("And its colour?"))
local a2 = msg("assistant", q("Grey."))
local u3 = msg("user", q("Thanks"))

local t1 = chat({sys, u1})
local t2 = chat({sys, u1, a1, u2})
local t3 = chat({sys, u1, a1, u2, a2, u3})
local k1 = key(t1)
check(k1 ~= nil and k1:sub(1, 2) == "m:", "turn 1 has a head key")
check(key(t2) == k1 and key(t3) == k1, "every turn of a conversation has the same key")
check(k1 == "m:" .. sys .. "\0" .. u1, "the key is the head's raw text, exactly")
local odd = msg("system", q("one escaped quote \\\" then a } and a ], and a backslash \\\\"))
check(key(chat({odd, u2, a2})) == "m:" .. odd .. "\0" .. u2, "escapes inside strings: " .. odd)
local long = msg("user", q(string.rep("x", 70000)))
check(key(chat({sys, long})) == "m:" .. sys .. "\0" .. long:sub(1, 65536), "each part is cut at 64 KiB")

-- Another conversation: another system prompt, or the same system prompt with another question.
check(key(chat({msg("system", q("Other.")), u1})) ~= k1, "another system prompt, another key")
check(key(chat({sys, msg("user", q("Hello"))})) ~= k1, "another first question, another key")
-- No system message: the first user message alone.
local k_nosys = key(chat({u2, a2, u3}))
check(k_nosys ~= nil and k_nosys == key(chat({u2})), "without a system message the key is the first user message")

-- Bodies HAProxy cut at its buffer: the same byte in every turn, so the same key, as long as
-- the cut falls in the head.
for _, cut in ipairs({#t1 - 20, 9000, 200, 60}) do
  check(key(t2, nil, cut) == key(t3, nil, cut) and key(t1, nil, cut) == key(t2, nil, cut),
        "cut at " .. cut .. ": the same key in every turn")
end
check(key('{"model":"m","mess', nil) == nil, "a body cut before the messages has no key")

-- X-Session-Id first, then the user field.
check(key(t1, {["x-session-id"] = "abc"}) == "s:abc", "X-Session-Id wins")
check(key(chat({sys, u1}, ',"user":"alice"')) == "u:alice", "the user field comes next")
check(key(chat({sys, u1}, ',"user":""')) == k1, "an empty user field is ignored")
check(key(chat({sys, u1}, ',"user":{"x":"alice"}')) == k1, "a user field that is not a string is ignored")

-- A nested "user" or "messages" is not a top-level member.
check(key('{"metadata":{"user":"bob"},"messages":[' .. u2 .. ']}') == k_nosys,
      "a nested user field is ignored")

-- /v1/completions: the prompt's first line.
local p1 = key('{"prompt":"Instructions: be brief.\\nQ: one\\nA:","max_tokens":4}')
local p2 = key('{"prompt":"Instructions: be brief.\\nQ: one\\nA: 1\\nQ: two\\nA:","max_tokens":4}')
check(p1 == "p:Instructions: be brief." and p1 == p2, "completions: the prompt's first line")

-- Not JSON, or nothing to key on: no key (round robin).
for _, body in ipairs({"", "not json", "[1,2]", '{"prompt":[1,2,3]}', '{"messages":"x"}',
                       '{"messages":[]}', '{"messages":[{"role":"assistant","content":"x"}]}'}) do
  check(key(body) == nil, "no key for " .. body)
end

-- Hostile shapes end quickly and never fail: deep nesting, endless escapes, cut strings.
local t0 = os.clock()
check(key('{"messages":' .. string.rep("[", 100000)) == nil, "deep nesting")
check(key('{"messages":[{"role":"user","content":"' .. string.rep("\\\\", 300000)) ~= nil, "a cut string")
check(key(string.rep('{"a":', 50000)) == nil, "deep objects")
check(os.clock() - t0 < 2, "hostile bodies take " .. (os.clock() - t0) .. " s")

if failures > 0 then
  print(failures .. " failure(s)")
  os.exit(1)
end
print("conversation_key.lua: all checks passed")
