#!/usr/bin/env ruby
# Greets someone by name, from Ruby.
# __version__ = "1.0.0"
# __tool_type__ = "ruby"
# __executor_id__ = "rye/core/runtimes/ruby/ruby"
# __category__ = "examples/ruby"
# CONFIG_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "description": "Who to greet"}}, "required": ["name"]}
require "json"

input = $stdin.read
params = input.strip.empty? ? {} : JSON.parse(input)
name = params.fetch("name", "world")
puts JSON.generate({ "greeting" => "Hello, #{name}!", "ruby" => RUBY_VERSION })
