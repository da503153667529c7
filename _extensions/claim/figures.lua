-- After each figure's caption in HTML: " Data: <files>. Notebook: <notebook>." linking what the figure was drawn from,
-- as offload-lab's pandoc build prints it (offload_lab.paper.render _source_inlines). `offload-lab paper prepare`
-- writes the labels and paths beside claims.json (figure-links.json). Quarto hands user filters a figure with a
-- label as a FloatRefTarget (its normalize pass, quarto-cli src/resources/filters/normalize/astpipeline.lua).
local function beside(file)
  if quarto and quarto.utils and quarto.utils.resolve_path then return quarto.utils.resolve_path(file) end
  local here = PANDOC_SCRIPT_FILE and PANDOC_SCRIPT_FILE:match("^(.*)[/\\]") or "."
  return here .. "/" .. file
end
local cf = dofile(beside("claims-file.lua"))
local links, meta_ = nil, nil

local function is_html()
  if quarto and quarto.doc and quarto.doc.is_format then return quarto.doc.is_format("html") end
  return FORMAT and FORMAT:match("html") ~= nil
end

local function load(meta)
  meta_ = meta
  local f = io.open(pandoc.path.join({ pandoc.path.directory(cf.path(meta)), "figure-links.json" }), "r")
  if not f then return end
  local ok, data = pcall(pandoc.json.decode, f:read("a"), false)
  f:close()
  if ok and type(data) == "table" then links = data end
end

local function image_stem(blocks)
  local stem = nil
  pandoc.Blocks(blocks):walk({ Image = function(img)
    stem = stem or img.src:match("([^/\\]+)%.[%w]+$")
  end })
  return stem
end

local function provenance(stem)
  local rec = links and stem and links[stem]
  if not rec then return nil end
  local out = pandoc.Inlines({ pandoc.Space(), pandoc.Str("Data:") })
  for i, f in ipairs(rec.files or {}) do
    if i > 1 then out:insert(pandoc.Str(",")) end
    out:insert(pandoc.Space())
    out:insert(pandoc.Link(f.label, cf.href(meta_, f.path), f.title, pandoc.Attr("", { "figure-source" })))
  end
  out:insert(pandoc.Str("."))
  if type(rec.notebook) == "string" then
    local name = rec.notebook:match("([^/\\]+)$")
    out:extend({ pandoc.Space(), pandoc.Str("Notebook:"), pandoc.Space(),
      pandoc.Link(name, cf.href(meta_, rec.notebook), rec.notebook, pandoc.Attr("", { "figure-notebook" })),
      pandoc.Str(".") })
  end
  return pandoc.Span(out, pandoc.Attr("", { "figure-provenance" }))
end

local function append(caption, span)
  -- A caption comes as a Plain (Quarto's caption_long once a filter has seen it), as Blocks (pandoc's Figure
  -- caption) or as Inlines (an image's own caption): the links go after its text.
  local kind = caption and pandoc.utils.type(caption)
  if kind == "Inlines" then
    caption:insert(span)
    return true
  elseif kind == "Blocks" or kind == "List" then
    local first = caption[1]
    if first and first.content then first.content:insert(span) return true end
  elseif caption and caption.content then
    caption.content:insert(span)
    return true
  end
  return false
end

return {
  { Meta = function(meta) load(meta) end },
  {
    FloatRefTarget = function(float)
      if not is_html() or float.type ~= "Figure" then return nil end
      local span = provenance(image_stem(float.content))
      if not span then return nil end
      if append(float.caption_long, span) then return float end
      return nil
    end,
    Figure = function(fig)
      if not is_html() then return nil end
      local span = provenance(image_stem(fig.content))
      if span and append(fig.caption.long, span) then return fig end
      return nil
    end,
  },
}
