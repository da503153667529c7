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

-- Where readers find a data file: `offload-lab: data-url:` (e.g. a permalink base), else a path relative to the
-- page being written. Under Quarto that page is where the project puts it: a manuscript article paper/paper.qmd
-- lands in _manuscript/paper/index.html, i.e. quarto.project.output_directory joined with the input's directory
-- relative to the project. quarto.doc.output_file is not that in Quarto 1.7: a manuscript hands pandoc an absolute
-- output file beside the source (paper/index.html), which init.lua outputFile() returns as it is, and links made
-- from it miss a level once Quarto moves the page (issue 30). Data paths are relative to quarto.project.directory.
-- Plain pandoc (the tests) has neither: one directory below the root, as offload-lab's own build writes
-- _output/<campaign>/paper.html two below it and links from there itself.
local function page_directory(doc, project)
  local input = doc.input_file
  if project.output_directory and input then
    local rel = pandoc.path.make_relative(pandoc.path.directory(input), project.directory)
    if rel and rel ~= "." then return pandoc.path.join({ project.output_directory, rel }) end
    return project.output_directory
  end
  local page = doc.output_file
  if not page then return nil end
  if not pandoc.path.is_absolute(page) then page = pandoc.path.join({ project.directory, page }) end
  return pandoc.path.directory(page)
end

function M.href(meta, path)
  local ol = meta and meta["offload-lab"]
  if ol and ol["data-url"] then return pandoc.utils.stringify(ol["data-url"]) .. path end
  if path:sub(1, 1) == "/" then return "file://" .. path end
  local doc, project = quarto and quarto.doc, quarto and quarto.project
  -- `offload-lab paper build` copies the page out of Quarto's output directory: links from where the copy lands.
  local dir = nil
  if doc and project and project.directory then
    dir = os.getenv("OFFLOAD_LAB_HTML_DIR")
    if not dir or dir == "" then dir = page_directory(doc, project) end
  end
  if dir then
    local target = pandoc.path.join({ project.directory, path })
    -- true: allow "../" steps (https://pandoc.org/lua-filters.html#pandoc.path.make_relative)
    return pandoc.path.make_relative(target, dir, true)
  end
  return "../" .. path
end

return M
