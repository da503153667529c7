-- {{< claim NAME >}}: the printed text of a claim from claims.json, with its provenance.
-- HTML: a link to the data file, titled with the file and its sha256. Other formats: the text in a span.
-- Quarto documents quarto.utils.resolve_path for files next to an extension's script; plain pandoc has
-- PANDOC_SCRIPT_FILE.
local function beside(file)
  if quarto and quarto.utils and quarto.utils.resolve_path then return quarto.utils.resolve_path(file) end
  local here = PANDOC_SCRIPT_FILE and PANDOC_SCRIPT_FILE:match("^(.*)[/\\]") or "."
  return here .. "/" .. file
end
local cf = dofile(beside("claims-file.lua"))
local data = nil

local function is_html()
  if quarto and quarto.doc and quarto.doc.is_format then return quarto.doc.is_format("html") end
  return FORMAT and FORMAT:match("html") ~= nil
end

-- Where readers find a data file: `offload-lab: data-url:` (e.g. a permalink base), else relative to the output,
-- which a manuscript writes one directory below the repository root (_manuscript/).
local function href(meta, path)
  local ol = meta and meta["offload-lab"]
  if ol and ol["data-url"] then return pandoc.utils.stringify(ol["data-url"]) .. path end
  if path:sub(1, 1) == "/" then return "file://" .. path end
  return "../" .. path
end

local function claim(args, kwargs, meta)
  if data == nil then data = cf.load(meta) or false end
  local name = pandoc.utils.stringify(args[1] or "")
  local c = data and data.claims and data.claims[name]
  if not c then
    cf.warn("unknown claim " .. name)
    return cf.marker(name, "claim-unknown")
  end
  if c.status ~= "ok" then
    return cf.marker(name, "claim-absent")
  end
  local f = c.files[1]
  local title = name .. ": " .. f.path .. " sha256 " .. f.sha256
  local text = pandoc.Inlines(c.text)
  if is_html() then
    return pandoc.Link(text, href(meta, f.path), title, pandoc.Attr("", { "claim" }, { { "data-claim", name } }))
  end
  return pandoc.Span(text, pandoc.Attr("", { "claim" }, { { "data-claim", name }, { "title", title } }))
end

return { ["claim"] = claim }
