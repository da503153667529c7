-- Locating and reading claims.json, shared by claim.lua (shortcode) and sections.lua (filter).
-- Neither ever calls error(): Quarto has no clean fatal path from Lua, so failures show up as visible
-- "?claim:" markers, which `offload-lab paper audit` (post-render) rejects; `paper prepare` (pre-render) has
-- already failed the build for anything it could see.
local M = {}

function M.warn(msg)
  if quarto and quarto.log and quarto.log.warning then
    quarto.log.warning("[offload-lab] " .. msg)
  else
    io.stderr:write("[offload-lab] " .. msg .. "\n")
  end
end

local function dirname(p)
  return p:match("^(.*)[/\\]") or "."
end

local function is_abs(p)
  return p:sub(1, 1) == "/" or p:match("^%a:[/\\]") ~= nil
end

local function readable(p)
  local f = io.open(p, "r")
  if f then f:close() return true end
  return false
end

-- OFFLOAD_LAB_CLAIMS wins (set by `offload-lab paper build`); else `offload-lab: claims:` from the front matter,
-- relative to the document, then to the working directory.
function M.path(meta)
  local env = os.getenv("OFFLOAD_LAB_CLAIMS")
  if env and env ~= "" then return env end
  local rel = "_generated/claims.json"
  local ol = meta and meta["offload-lab"]
  if ol and ol.claims then rel = pandoc.utils.stringify(ol.claims) end
  if is_abs(rel) then return rel end
  local bases = {}
  if quarto and quarto.doc and quarto.doc.input_file then table.insert(bases, dirname(quarto.doc.input_file)) end
  if PANDOC_STATE and PANDOC_STATE.input_files and PANDOC_STATE.input_files[1] then
    table.insert(bases, dirname(PANDOC_STATE.input_files[1]))
  end
  table.insert(bases, ".")
  for _, b in ipairs(bases) do
    if readable(b .. "/" .. rel) then return b .. "/" .. rel end
  end
  return bases[1] .. "/" .. rel
end

function M.load(meta)
  local path = M.path(meta)
  local f = io.open(path, "r")
  if not f then
    M.warn("no claims file at " .. path .. "; run `offload-lab paper prepare` first")
    return nil
  end
  local text = f:read("a")
  f:close()
  local ok, data = pcall(pandoc.json.decode, text, false)
  if not ok or type(data) ~= "table" then
    M.warn("claims file " .. path .. " is not JSON")
    return nil
  end
  return data
end

function M.marker(name, class)
  return pandoc.Span(pandoc.Inlines("?claim:" .. name), pandoc.Attr("", { class }, { { "data-claim", name } }))
end

return M
